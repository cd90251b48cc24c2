// The hub owner's keys, kept as NATS's own files in one private directory: the
// operator's, the system account's (the hub's administration), and for each family its
// account and the JWTs of its devices. A device's seed is never here: the device makes
// it, and only its public key comes to be signed.
//
//   hub.conf                    nats-server's configuration (operator mode)
//   operator.nk, operator.jwt   the operator
//   system.nk, system.jwt       the system account; admin.creds, its user
//   families/<family hex>/account.nk, account.jwt, devices/<device>.jwt

import Foundation
import Glibc

public struct HubKeys: Sendable {
    public let directory: String
    let operatorKey: NKey

    /// Where the owner's administration credentials are (the system account's user).
    public var adminCredentials: String { directory + "/admin.creds" }

    /// Makes a new hub's keys in `directory` (which must not hold any) and its server
    /// configuration, listening on `listen` (`HOST:PORT`), storing under `storeDirectory`.
    public static func create(in directory: String, listen: String, storeDirectory: String) throws -> HubKeys {
        guard !FileManager.default.fileExists(atPath: directory + "/operator.nk") else {
            throw NKeyError("\(directory) already holds a hub's keys; use them, or choose another directory")
        }
        if let present = try? FileManager.default.contentsOfDirectory(atPath: directory), !present.isEmpty {
            throw NKeyError("\(directory) is not empty: the hub's keys go into a directory of their own; choose a new one")
        }
        try makePrivateDirectory(directory)
        chmod(directory, 0o700)  // one made before (empty) keeps its mode otherwise
        let now = Int64(Date().timeIntervalSince1970)
        let operatorKey = try NKey.generate(.operator_)
        let system = try NKey.generate(.account)
        let admin = try NKey.generate(.user)
        let operatorJWT = try HubJWT.sign(
            subject: operatorKey.publicKey, name: "permission-hub", nats: HubJWT.operatorClaims(systemAccount: system.publicKey),
            by: operatorKey, issuedAt: now)
        let systemJWT = try HubJWT.sign(
            subject: system.publicKey, name: "SYS", nats: HubJWT.accountClaims(jetStream: false, revoked: [:]), by: operatorKey,
            issuedAt: now)
        let adminJWT = try HubJWT.sign(subject: admin.publicKey, name: "admin", nats: HubJWT.adminClaims(), by: system, issuedAt: now)
        try writePrivate(directory + "/operator.nk", operatorKey.seed + "\n")
        try writePrivate(directory + "/operator.jwt", operatorJWT.text + "\n")
        try writePrivate(directory + "/system.nk", system.seed + "\n")
        try writePrivate(directory + "/system.jwt", systemJWT.text + "\n")
        try writePrivate(directory + "/admin.creds", HubCredentials.text(jwt: adminJWT, seed: admin))
        let config = """
            # nats-server's configuration for a family hub (made by permission-relay hub init).
            # Operator mode: each family is an account of its own, each device a user of it.
            listen: "\(listen)"
            # A device whose link died without a word is noticed within a minute: its
            # consumer is then free for it to come back to.
            ping_interval: "20s"
            ping_max: 3
            operator: "\(directory)/operator.jwt"
            system_account: \(system.publicKey)
            resolver: {
                type: full
                dir: "\(directory)/accounts"
                allow_delete: false
                interval: "2m"
            }
            resolver_preload: {
                \(system.publicKey): "\(systemJWT.text)"
            }
            jetstream: {
                store_dir: "\(storeDirectory)"
            }

            """
        try writePrivate(directory + "/hub.conf", config)
        return try HubKeys(directory: directory)
    }

    /// The keys of the hub whose owner's directory is `directory`.
    public init(directory: String) throws {
        self.directory = directory
        guard FileManager.default.fileExists(atPath: directory + "/operator.nk") else {
            throw NKeyError(
                "\(directory) holds no hub's keys: give the directory `permission-relay hub init` made on the hub's machine with"
                    + " --keys DIR (a copy of it will do), or make a new hub with `permission-relay hub init`")
        }
        operatorKey = try NKey(seed: try Self.read(directory + "/operator.nk"))
        // Read to be sure the directory is whole; signing needs the operator's key alone.
        _ = try HubJWT(try Self.read(directory + "/operator.jwt"))
        _ = try HubJWT(try Self.read(directory + "/system.jwt"))
    }

    /// The family's account, made (here, not yet on the hub) if it has none.
    public func account(of family: String) throws -> (key: NKey, jwt: HubJWT) {
        let folder = familyDirectory(family)
        if FileManager.default.fileExists(atPath: folder + "/account.nk") {
            return (try NKey(seed: try Self.read(folder + "/account.nk")), try HubJWT(try Self.read(folder + "/account.jwt")))
        }
        try Self.makePrivateDirectory(folder + "/devices")
        let key = try NKey.generate(.account)
        let jwt = try signAccount(key.publicKey, family: family, revoked: [:])
        try Self.writePrivate(folder + "/account.nk", key.seed + "\n")
        try Self.writePrivate(folder + "/account.jwt", jwt.text + "\n")
        return (key, jwt)
    }

    /// Signs a device of `family` whose public key is `devicePublicKey`: the JWT that
    /// device joins with. The family's account, as it must now be, is handed to `push`
    /// (which gives it to the hub) before anything is kept here: a failed push changes
    /// nothing. A key removed before is trusted again; a key the name was given before
    /// (a device reset, or replaced) is revoked: one name, one device. `held` gives the
    /// account as the hub holds it (see `current(of:held:)`).
    public func addDevice(
        _ name: String, publicKey devicePublicKey: String, family: String, names: HubFamilyNames,
        held: (_ account: String) throws -> HubJWT? = { _ in nil }, push: (HubJWT) throws -> Void
    ) throws -> HubJWT {
        guard NKey.isPublicKey(devicePublicKey, of: .user) else {
            throw NKeyError("\(devicePublicKey) is not a device's key (`permission-relay device key` on the device prints it: U…)")
        }
        if let other = try devices(of: family).first(where: { $0.publicKey == devicePublicKey && $0.name != name && $0.removedAt == nil }) {
            throw NKeyError("this key is paired as \(other.name) of family \(family) already; remove that device first, or use its name")
        }
        let (key, account) = try current(of: family, held: held)
        // A revocation holds back every JWT of the key issued until then: a key added
        // again is trusted only once it is gone.
        var revoked = account.revocations
        revoked[devicePublicKey] = nil
        let path = familyDirectory(family) + "/devices/\(name).jwt"
        if let before = try? HubJWT(try Self.read(path)), before.subject != devicePublicKey {
            revoked[before.subject] = Int64(Date().timeIntervalSince1970)
        }
        let updated =
            revoked == account.revocations
            ? account : try signAccount(key.publicKey, family: family, revoked: revoked, after: account.issuedAt)
        let device = try HubJWT.sign(
            subject: devicePublicKey, name: name, nats: HubJWT.deviceClaims(family: family, names: names), by: key,
            issuedAt: Int64(Date().timeIntervalSince1970))
        try push(updated)  // the first device makes the family's account on the hub
        try Self.writePrivate(familyDirectory(family) + "/account.jwt", updated.text + "\n")
        try Self.writePrivate(path, device.text + "\n")
        return device
    }

    /// Stops trusting a device of `family`: its key is revoked in the family's account,
    /// handed to `push` (which gives it to the hub) before anything is kept here. `held`:
    /// as for `addDevice`.
    public func removeDevice(
        _ name: String, family: String, held: (_ account: String) throws -> HubJWT? = { _ in nil }, push: (HubJWT) throws -> Void
    ) throws {
        let path = familyDirectory(family) + "/devices/\(name).jwt"
        guard FileManager.default.fileExists(atPath: path) else {
            throw NKeyError("family \(family) has no device \(name) (`permission-relay device list` shows its devices)")
        }
        let device = try HubJWT(try Self.read(path))
        let (key, account) = try current(of: family, held: held)
        var revoked = account.revocations
        revoked[device.subject] = Int64(Date().timeIntervalSince1970)
        let updated = try signAccount(key.publicKey, family: family, revoked: revoked, after: account.issuedAt)
        try push(updated)
        try Self.writePrivate(familyDirectory(family) + "/account.jwt", updated.text + "\n")
    }

    /// The family's account as a change starts from: the one kept here, or the one the
    /// hub holds (`held`, asked by the account's public key; nil: it holds none) when that
    /// is as new or newer, as after a change made with another copy of these keys: a change
    /// made here never undoes one made there (a device removed there stays removed). A
    /// failure to ask fails the change: the hub keeps the account pushed last, so one made
    /// without knowing the hub's could trust a removed device again.
    private func current(of family: String, held: (String) throws -> HubJWT?) throws -> (key: NKey, jwt: HubJWT) {
        let (key, local) = try account(of: family)
        guard let hub = try held(key.publicKey), hub.subject == key.publicKey, hub.issuer == operatorKey.publicKey,
            hub.issuedAt >= local.issuedAt
        else { return (key, local) }
        return (key, hub)
    }

    /// A family's devices paired with this copy: name, public key, when paired, and when
    /// removed (nil: it is not), as the family's account says: the hub's (`held`, as for
    /// `addDevice`) when it is as new as this copy's or newer, else this copy's.
    public func devices(of family: String, held: (_ account: String) throws -> HubJWT? = { _ in nil }) throws -> [(
        name: String, publicKey: String, added: Int64, removedAt: Int64?
    )] {
        let folder = familyDirectory(family) + "/devices"
        guard let files = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return [] }
        let revoked = try current(of: family, held: held).jwt.revocations
        return try files.filter { $0.hasSuffix(".jwt") }.sorted().map { file in
            let jwt = try HubJWT(try Self.read(folder + "/" + file))
            return (jwt.name, jwt.subject, jwt.issuedAt, revoked[jwt.subject].flatMap { $0 >= jwt.issuedAt ? $0 : nil })
        }
    }

    /// Signs the family's account anew, later than the one kept here and than `after`.
    private func signAccount(_ publicKey: String, family: String, revoked: [String: Int64], after: Int64 = 0) throws -> HubJWT {
        // Each signing is later than the last, by the second (JWTs are dated in seconds),
        // and never from the future, which is suspect: a second signing waits for the next.
        // (nats-server keeps whichever account JWT is pushed last, older or not.)
        let previous = max(after, (try? HubJWT(try Self.read(familyDirectory(family) + "/account.jwt")))?.issuedAt ?? 0)
        var now = Date().timeIntervalSince1970
        if Double(previous) - now > 10 {
            throw NKeyError(
                "family \(family)'s account was signed \(Int(Double(previous) - now)) s ahead of this machine's clock (by another"
                    + " copy of the hub's keys): set the clocks right (NTP), then run the command again")
        }
        if Int64(now) <= previous {
            Thread.sleep(forTimeInterval: Double(previous + 1) - now)
            now = Date().timeIntervalSince1970
        }
        return try HubJWT.sign(
            subject: publicKey, name: family, nats: HubJWT.accountClaims(jetStream: true, revoked: revoked), by: operatorKey,
            issuedAt: max(Int64(now), previous + 1))
    }

    private func familyDirectory(_ family: String) -> String { directory + "/families/" + HubJWT.hex(family) }

    static func read(_ path: String) throws -> String {
        do {
            return try String(contentsOfFile: path, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        } catch {
            throw NKeyError("cannot read \(path): \(error.localizedDescription)")
        }
    }

    /// Writes a file only its owner may read, whole or not at all (a key, credentials).
    public static func writePrivate(_ path: String, _ text: String) throws {
        let temporary = path + ".new"
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        let bytes = Array(text.utf8)
        guard fd >= 0 else { throw NKeyError("cannot write \(path): \(String(cString: strerror(errno)))") }
        let written = write(fd, bytes, bytes.count) == bytes.count && fsync(fd) == 0
        close(fd)
        guard written, rename(temporary, path) == 0 else { throw NKeyError("cannot write \(path): \(String(cString: strerror(errno)))") }
    }

    static func makePrivateDirectory(_ path: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw NKeyError("cannot make \(path): \(error.localizedDescription)")
        }
    }
}

extension HubConnection {
    /// The account whose public key is `account` as the hub holds it; nil when it holds
    /// none (a hub made anew, or one that lost its accounts). The hub's resolver answers a
    /// lookup only for an account it holds, so the list of those it holds is asked first: a
    /// request that fails fails this, never counts as "none".
    public func heldAccount(_ account: String) throws -> HubJWT? {
        let list = try request("$SYS.REQ.CLAIMS.LIST", body: [])
        let answer = try? JSONSerialization.jsonObject(with: Data(list)) as? [String: Any]
        guard let held = answer?["data"] as? [String] else {
            throw NKeyError("the hub's list of its accounts cannot be read: \(String(decoding: list.prefix(200), as: UTF8.self))")
        }
        guard held.contains(account) else { return nil }
        let reply = try request("$SYS.REQ.ACCOUNT.\(account).CLAIMS.LOOKUP", body: [])
        return reply.isEmpty ? nil : try HubJWT(String(decoding: reply, as: UTF8.self))
    }

    /// Gives the hub a family's account as signed now (made, or with devices revoked):
    /// the hub applies it at once, cutting off a revoked device's connections.
    public func push(account: HubJWT) throws {
        let reply = try request("$SYS.REQ.CLAIMS.UPDATE", body: Array(account.text.utf8))
        let answer = try? JSONSerialization.jsonObject(with: Data(reply)) as? [String: Any]
        if let error = answer?["error"] as? [String: Any] {
            throw NKeyError("the hub refused the family's account: \(error["description"] ?? error)")
        }
    }
}
