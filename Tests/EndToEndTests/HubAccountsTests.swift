// A hub in operator mode, against a real nats-server: each family an account of its own
// that no other family's device can read or write, each device a user signed by its
// family, and a device removed cut off at once.

import Foundation
@testable import RelayHub
import RelayModel
import XCTest

final class HubAccountsTests: XCTestCase {
    private var keysDirectory = ""

    override func setUpWithError() throws {
        keysDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("hub-keys-\(UUID().uuidString.prefix(8))").path
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: keysDirectory)
    }

    /// A hub whose keys are made in `keysDirectory`.
    private func startHub() throws -> (NATSServer, HubKeys) {
        var keys: HubKeys?
        let server = try NATSServer { port, store in
            keys = try HubKeys.create(in: self.keysDirectory, listen: "127.0.0.1:\(port)", storeDirectory: store.path)
            return self.keysDirectory + "/hub.conf"
        }
        return (server, try XCTUnwrap(keys))
    }

    private func names(_ family: String, _ device: String) -> HubFamilyNames {
        HubFamilyNames(
            stream: HubNames.stream(family: family), subjects: HubNames.all(family: family), consumer: HubNames.consumer(device: device))
    }

    /// Pairs a new device of `family` (its seed made here, as on the device) and returns the
    /// path of its credentials file.
    /// `seed`: the device's key (default: a new one); `failing`: the hub cannot be told.
    private func pair(
        _ device: String, of family: String, keys: HubKeys, admin: HubConnection, seed given: NKey? = nil, failing: Bool = false
    ) throws -> String {
        struct Unreachable: Error {}
        let seed = try given ?? NKey.generate(.user)
        let jwt = try keys.addDevice(
            device, publicKey: seed.publicKey, family: family, names: names(family, device), held: admin.heldAccount
        ) {
            if failing { throw Unreachable() }
            try admin.push(account: $0)
        }
        let path = keysDirectory + "/\(device)-\(seed.publicKey.prefix(8)).creds"
        try HubCredentials.text(jwt: jwt, seed: seed).write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    private func stream(of family: String) -> HubStream {
        HubStream(name: HubNames.stream(family: family), subjects: [HubNames.all(family: family)])
    }

    func testADeviceReachesOnlyItsOwnFamily() throws {
        let (server, keys) = try startHub()
        let admin = try HubConnection(url: server.url, name: "admin", credentials: keys.adminCredentials, timeoutMillis: 2000)
        let tablet = try HubConnection(
            url: server.url, name: "tablet", credentials: try pair("tablet", of: "smiths", keys: keys, admin: admin), timeoutMillis: 2000)
        // What the hub refuses a client is dropped without an answer: short waits.
        let laptop = try HubConnection(
            url: server.url, name: "laptop", credentials: try pair("laptop", of: "jones", keys: keys, admin: admin), timeoutMillis: 500)
        try tablet.ensureStream(stream(of: "smiths"))
        try laptop.ensureStream(stream(of: "jones"))
        XCTAssertEqual(try tablet.publish(HubNames.ask(family: "smiths", question: "Q1"), id: "Q1", body: [1]), .stored(1))

        // The Jones laptop can neither write the Smiths' subjects nor read their stream.
        XCTAssertThrowsError(try laptop.publish(HubNames.ask(family: "smiths", question: "Q2"), id: "Q2", body: [2]))
        XCTAssertThrowsError(
            try laptop.lastMessage(stream: HubNames.stream(family: "smiths"), subject: HubNames.ask(family: "smiths", question: "Q1")))
        XCTAssertThrowsError(
            try laptop.subscribe(
                stream: HubNames.stream(family: "smiths"), durable: HubNames.consumer(device: "laptop"),
                filter: HubNames.all(family: "smiths"), onMessage: { _ in }))
        XCTAssertThrowsError(try laptop.ensureStream(stream(of: "smiths")), "it cannot make the Smiths' stream in its own account either")

        // The tablet reads what it wrote, through its own consumer only.
        let received = Received()
        let subscription = try tablet.subscribe(
            stream: HubNames.stream(family: "smiths"), durable: HubNames.consumer(device: "tablet"), filter: HubNames.all(family: "smiths"),
            onMessage: received.add)
        XCTAssertEqual(received.take(1, within: 5).map(\.body), [[1]])
        XCTAssertThrowsError(
            try tablet.subscribe(
                stream: HubNames.stream(family: "smiths"), durable: HubNames.consumer(device: "phone"),
                filter: HubNames.all(family: "smiths"), onMessage: { _ in }),
            "another device's consumer is not the tablet's to read")
        _ = subscription
    }

    func testOnlySignedDevicesConnect() throws {
        let (server, keys) = try startHub()
        XCTAssertThrowsError(try HubConnection(url: server.url, name: "anonymous", timeoutMillis: 2000))
        // A key the family never signed, with a JWT signed by a stranger's account.
        let stranger = try NKey.generate(.account)
        let seed = try NKey.generate(.user)
        let forged = try HubJWT.sign(
            subject: seed.publicKey, name: "forged", nats: HubJWT.deviceClaims(family: "smiths", names: names("smiths", "forged")),
            by: stranger,
            issuedAt: Int64(Date().timeIntervalSince1970))
        let path = keysDirectory + "/forged.creds"
        try HubCredentials.text(jwt: forged, seed: seed).write(toFile: path, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try HubConnection(url: server.url, name: "forged", credentials: path, timeoutMillis: 2000))
        _ = keys
    }

    func testARemovedDeviceIsCutOffAtOnce() throws {
        let (server, keys) = try startHub()
        let admin = try HubConnection(url: server.url, name: "admin", credentials: keys.adminCredentials, timeoutMillis: 2000)
        let credentials = try pair("tablet", of: "smiths", keys: keys, admin: admin)
        let tablet = try HubConnection(url: server.url, name: "tablet", credentials: credentials, timeoutMillis: 2000)
        try tablet.ensureStream(stream(of: "smiths"))
        XCTAssertEqual(try tablet.publish(HubNames.ask(family: "smiths", question: "Q1"), id: "Q1", body: [1]), .stored(1))
        XCTAssertEqual(try keys.devices(of: "smiths").map { $0.removedAt != nil }, [false])

        try keys.removeDevice("tablet", family: "smiths") { try admin.push(account: $0) }
        XCTAssertEqual(try keys.devices(of: "smiths").map { $0.removedAt != nil }, [true])
        XCTAssertThrowsError(try tablet.publish(HubNames.ask(family: "smiths", question: "Q2"), id: "Q2", body: [2]))
        XCTAssertFalse(tablet.isConnected)
        XCTAssertThrowsError(try HubConnection(url: server.url, name: "tablet", credentials: credentials, timeoutMillis: 2000))

        // Added again (a new JWT for the same key), it is trusted again.
        let seed = try NKey(
            seed: try String(contentsOfFile: credentials, encoding: .utf8).split(separator: "\n").first { $0.hasPrefix("SU") }.map(
                String.init) ?? "")
        let again = try HubConnection(
            url: server.url, name: "tablet", credentials: try pair("tablet", of: "smiths", keys: keys, admin: admin, seed: seed),
            timeoutMillis: 2000)
        XCTAssertEqual(try again.publish(HubNames.ask(family: "smiths", question: "Q2"), id: "Q2", body: [2]), .stored(2))
    }

    /// A device removed with one copy of the hub's keys (a guardian's laptop, say) stays
    /// removed when the other copy, which has not seen the removal, pairs a device next:
    /// each change starts from the family's account as the hub holds it.
    func testADeviceRemovedWithAnotherCopyOfTheKeysStaysRemoved() throws {
        let (server, keys) = try startHub()
        let admin = try HubConnection(url: server.url, name: "admin", credentials: keys.adminCredentials, timeoutMillis: 2000)
        let tablet = try pair("tablet", of: "smiths", keys: keys, admin: admin)
        let copyDirectory = keysDirectory + "-copy"
        try FileManager.default.copyItem(atPath: keysDirectory, toPath: copyDirectory)
        defer { try? FileManager.default.removeItem(atPath: copyDirectory) }
        try HubKeys(directory: copyDirectory).removeDevice("tablet", family: "smiths", held: admin.heldAccount) {
            try admin.push(account: $0)
        }
        XCTAssertThrowsError(try HubConnection(url: server.url, name: "tablet", credentials: tablet, timeoutMillis: 2000))
        // This copy's list learns of the removal from the hub, and only from it.
        XCTAssertEqual(try keys.devices(of: "smiths").map { $0.removedAt != nil }, [false])
        XCTAssertEqual(try keys.devices(of: "smiths", held: admin.heldAccount).map { $0.removedAt != nil }, [true])
        // The hub's account cannot be asked for: the change fails, and nothing is pushed.
        struct Unanswered: Error {}
        var pushed = false
        XCTAssertThrowsError(
            try keys.addDevice(
                "phone", publicKey: try NKey.generate(.user).publicKey, family: "smiths", names: names("smiths", "phone"),
                held: { _ in throw Unanswered() }, push: { _ in pushed = true }))
        XCTAssertFalse(pushed, "an account made without the hub's could trust the tablet again")
        let watch = try pair("watch", of: "smiths", keys: keys, admin: admin)
        XCTAssertTrue(try HubConnection(url: server.url, name: "watch", credentials: watch, timeoutMillis: 2000).isConnected)
        XCTAssertThrowsError(
            try HubConnection(url: server.url, name: "tablet", credentials: tablet, timeoutMillis: 2000), "still removed")
        let removed = try XCTUnwrap(keys.devices(of: "smiths").first { $0.name == "tablet" })
        XCTAssertNotNil(removed.removedAt, "this copy knows of the removal now")

        // A copy that has the family's account but none of its devices asks the hub too.
        let bare = keysDirectory + "-bare"
        try FileManager.default.copyItem(atPath: keysDirectory, toPath: bare)
        defer { try? FileManager.default.removeItem(atPath: bare) }
        let (key, _) = try keys.account(of: "smiths")
        let devices = try XCTUnwrap(
            FileManager.default.subpathsOfDirectory(atPath: bare).first { $0.hasSuffix("/devices") && $0.contains(HubJWT.hex("smiths")) })
        for file in try FileManager.default.contentsOfDirectory(atPath: bare + "/" + devices) {
            try FileManager.default.removeItem(atPath: bare + "/" + devices + "/" + file)
        }
        try keys.removeDevice("watch", family: "smiths", held: admin.heldAccount) { try admin.push(account: $0) }
        _ = try HubKeys(directory: bare).addDevice(
            "laptop", publicKey: try NKey.generate(.user).publicKey, family: "smiths", names: names("smiths", "laptop"),
            held: admin.heldAccount, push: { try admin.push(account: $0) })
        XCTAssertEqual(try admin.heldAccount(key.publicKey)?.revocations.keys.count, 2, "the tablet and the watch stay removed")
        XCTAssertThrowsError(try HubConnection(url: server.url, name: "watch", credentials: watch, timeoutMillis: 2000))
    }

    /// A hub that lost the accounts it held (its resolver's directory emptied, or the hub
    /// made anew from these keys) is given the family's account again by the next change,
    /// rather than wait for a lookup it never answers.
    func testAHubThatLostItsAccountsIsGivenTheFamilysAgain() throws {
        let (server, keys) = try startHub()
        var admin = try HubConnection(url: server.url, name: "admin", credentials: keys.adminCredentials, timeoutMillis: 2000)
        let tablet = try pair("tablet", of: "smiths", keys: keys, admin: admin)
        let (key, _) = try keys.account(of: "smiths")
        XCTAssertEqual(try admin.heldAccount(key.publicKey)?.subject, key.publicKey)
        server.kill()
        let accounts = keysDirectory + "/accounts"
        for file in try FileManager.default.contentsOfDirectory(atPath: accounts) {
            try FileManager.default.removeItem(atPath: accounts + "/" + file)
        }
        try server.start()
        admin = try HubConnection(url: server.url, name: "admin", credentials: keys.adminCredentials, timeoutMillis: 2000)
        XCTAssertNil(try admin.heldAccount(key.publicKey), "the hub holds none")
        XCTAssertThrowsError(try HubConnection(url: server.url, name: "tablet", credentials: tablet, timeoutMillis: 2000))
        let phone = try pair("phone", of: "smiths", keys: keys, admin: admin)
        for (name, credentials) in [("tablet", tablet), ("phone", phone)] {
            XCTAssertTrue(try HubConnection(url: server.url, name: name, credentials: credentials, timeoutMillis: 2000).isConnected, name)
        }
    }

    /// The hub's account signed by a copy whose clock is ahead: the change says so at once
    /// rather than wait for this clock to catch up.
    func testAnAccountSignedAheadOfThisClockIsSaidNotWaitedFor() throws {
        let (server, keys) = try startHub()
        let admin = try HubConnection(url: server.url, name: "admin", credentials: keys.adminCredentials, timeoutMillis: 2000)
        _ = try pair("tablet", of: "smiths", keys: keys, admin: admin)
        let (key, account) = try keys.account(of: "smiths")
        let ahead = try HubJWT.sign(
            subject: key.publicKey, name: "smiths", nats: HubJWT.accountClaims(jetStream: true, revoked: account.revocations),
            by: keys.operatorKey, issuedAt: Int64(Date().timeIntervalSince1970) + 3600)
        let started = Date()
        XCTAssertThrowsError(try keys.removeDevice("tablet", family: "smiths", held: { _ in ahead }, push: { _ in })) { error in
            XCTAssertTrue("\(error)".contains("ahead of this machine's clock"), "\(error)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
    }

    /// A name paired again with another key (a tablet reset) is one device: the key it had
    /// is cut off then, and removing the device cuts off the key it has.
    func testANamePairedWithANewKeyCutsOffTheOldOne() throws {
        let (server, keys) = try startHub()
        let admin = try HubConnection(url: server.url, name: "admin", credentials: keys.adminCredentials, timeoutMillis: 2000)
        let old = try pair("tablet", of: "smiths", keys: keys, admin: admin)
        let new = try pair("tablet", of: "smiths", keys: keys, admin: admin)
        XCTAssertEqual(try keys.devices(of: "smiths").map(\.name), ["tablet"])
        XCTAssertThrowsError(try HubConnection(url: server.url, name: "old", credentials: old, timeoutMillis: 2000), "the old key")
        XCTAssertTrue(try HubConnection(url: server.url, name: "new", credentials: new, timeoutMillis: 2000).isConnected, "the new key")
        try keys.removeDevice("tablet", family: "smiths") { try admin.push(account: $0) }
        for credentials in [old, new] {
            XCTAssertThrowsError(try HubConnection(url: server.url, name: "t", credentials: credentials, timeoutMillis: 2000))
        }
        // One key, one device: the same key under a second name is refused.
        let seed = try NKey.generate(.user)
        _ = try pair("laptop", of: "smiths", keys: keys, admin: admin, seed: seed)
        XCTAssertThrowsError(try pair("desktop", of: "smiths", keys: keys, admin: admin, seed: seed)) { error in
            XCTAssertTrue("\(error)".contains("paired as laptop"), "\(error)")
        }
    }

    /// A change the hub could not be told of is not kept: the device stays as it was.
    func testAChangeTheHubIsNotToldOfChangesNothing() throws {
        let (server, keys) = try startHub()
        let admin = try HubConnection(url: server.url, name: "admin", credentials: keys.adminCredentials, timeoutMillis: 2000)
        let credentials = try pair("tablet", of: "smiths", keys: keys, admin: admin)
        struct Unreachable: Error {}
        XCTAssertThrowsError(try keys.removeDevice("tablet", family: "smiths") { _ in throw Unreachable() })
        XCTAssertEqual(try keys.devices(of: "smiths").map { $0.removedAt != nil }, [false], "still listed as it still is: trusted")
        XCTAssertThrowsError(try pair("laptop", of: "smiths", keys: keys, admin: admin, failing: true))
        XCTAssertEqual(try keys.devices(of: "smiths").map(\.name), ["tablet"], "a device the hub was not told of is not listed")
        XCTAssertTrue(try HubConnection(url: server.url, name: "tablet", credentials: credentials, timeoutMillis: 2000).isConnected)
    }
}
