// `permission-relay hub init` and `device key|add|join|remove|list`: a family hub where
// each family is a NATS account of its own and each device a user of it. The hub's owner
// keeps the keys that sign (`hub init` makes them); a device makes its own key, and only
// its public half leaves it, to come back signed as the token it joins with.

import CLISupport
import Foundation
import Glibc
import RelayHub
import RelayModel
import RelayProtocol

struct HubCommand: Sendable {
    let words: [String]
    let summary: String
    let usage: String
    let run: @Sendable ([String]) throws -> Void

    static let all: [HubCommand] = [hubInit, key, add, join, remove, list]

    /// The group's help (`permission-relay device --help`).
    static func groupUsage(_ word: String) -> String? {
        let commands = all.filter { $0.words[0] == word }
        guard !commands.isEmpty else { return nil }
        return """
            OVERVIEW: \(word == "hub" ? "Set up a family hub." : "Pair devices with their family on the hub, and remove them.")

            USAGE: permission-relay \(word) <command> [options]

            COMMANDS:
            \(commands.map { "  \($0.words.dropFirst().joined(separator: " "))\n      \($0.summary)" }.joined(separator: "\n"))

            Run `permission-relay \(word) <command> --help` for a command's options.

            EXAMPLES:
            \(commands.flatMap(\.examples).joined(separator: "\n"))
            """
    }

    /// The lines of its usage's EXAMPLES section.
    var examples: [String] {
        guard let start = usage.range(of: "EXAMPLES:\n") else { return [] }
        return usage[start.upperBound...].split(separator: "\n").map(String.init)
    }

    static func unknown(_ word: String, _ rest: [String]) -> CLIError {
        let names = all.filter { $0.words[0] == word }.map { $0.words[1] }
        guard let first = rest.first, !first.hasPrefix("-") else {
            return .usage("\(word) needs a command: \(names.joined(separator: " or "))")
        }
        return .usage("unknown command \"\(word) \(first)\" (\(word) commands: \(names.joined(separator: ", ")))")
    }

    private static let keysOption = """
          --keys DIR      The hub owner's keys (default: \(HubPaths.defaultKeys))
        """
    private static let dataOption = """
          --data DIR      This device's relay data directory (default: \(Paths.defaultData))
        """
    private static let hubOption = """
          --hub URL       The hub (default: $PERMISSION_RELAY_HUB)
        """

    static let hubInit = HubCommand(
        words: ["hub", "init"], summary: "Make a new hub's keys and nats-server's configuration.",
        usage: """
            OVERVIEW: Make a new family hub's keys and its nats-server configuration (operator
            mode: each family an account of its own, each device a user of it). The keys sign
            families and devices: keep DIR private, and back it up.

            USAGE: permission-relay hub init [DIR] [--listen HOST:PORT] [--store DIR]

            OPTIONS:
              DIR                 Where the keys go (default: \(HubPaths.defaultKeys))
              --listen HOST:PORT  Where the hub listens (default: 0.0.0.0:4222)
              --store DIR         Where nats-server keeps JetStream's files, under DIR/jetstream
                                  (default: the keys' DIR)
              -h, --help          Show this help.

            EXAMPLES:
              permission-relay hub init
              nats-server -c ~/.config/permission-relay/hub/hub.conf
            """,
        run: { args in
            let a = try Arguments(args, valueFlags: ["--listen", "--store"], switchFlags: [])
            guard a.positionals.count <= 1 else { throw CLIError.usage("hub init takes one DIR at most") }
            let directory = Paths.absolute(a.positionals.first ?? HubPaths.defaultKeys)
            let listen = a.value("--listen") ?? "0.0.0.0:4222"
            guard let port = listen.split(separator: ":").last.flatMap({ Int($0) }), (1...65535).contains(port) else {
                throw CLIError.usage("--listen must be HOST:PORT, such as 0.0.0.0:4222")
            }
            let store = Paths.absolute(a.value("--store") ?? directory)
            let keys = try failure { try HubKeys.create(in: directory, listen: listen, storeDirectory: store) }
            printOut(
                """
                made the hub's keys in \(keys.directory) (keep this directory private, and back it up)
                start the hub:  nats-server -c \(keys.directory)/hub.conf
                then pair each device with `permission-relay device add`
                """)
        })

    static let key = HubCommand(
        words: ["device", "key"], summary: "Print this device's public key (made on first use; its seed never leaves).",
        usage: """
            OVERVIEW: Print this device's public key, for the hub's owner to pair it with
            `permission-relay device add NAME KEY`. The key is made on first use and kept in
            the data directory (hub-device.nk, mode 0600); only its public half is printed.

            USAGE: permission-relay device key [--data DIR]

            OPTIONS:
            \(dataOption)
              -h, --help      Show this help.

            EXAMPLES:
              permission-relay device key
            """,
        run: { args in
            let a = try Arguments(args, valueFlags: ["--data"], switchFlags: [])
            _ = try a.expectPositionals([])
            printOut(try HubPaths.deviceKey(data: a.value("--data") ?? Paths.defaultData).publicKey)
        })

    static let add = HubCommand(
        words: ["device", "add"], summary: "Pair a device with its family on the hub; prints its token.",
        usage: """
            OVERVIEW: Pair a device with its family on the hub (the family's account is made on
            the hub with its first device). With KEY (what `permission-relay device key` printed
            on that device), prints the token the device joins with: it is signed, not secret.
            Without KEY, pairs this device and writes its credentials to its data directory.
            Run where the hub's keys are.

            USAGE: permission-relay device add NAME [KEY] --family FAMILY [--hub URL] [--keys DIR] [--data DIR]

            OPTIONS:
              NAME            The device's name (as its relay's --device would be)
              --family FAMILY The family the device serves
            \(hubOption)
            \(keysOption)
            \(dataOption)
              -h, --help      Show this help.

            EXAMPLES:
              permission-relay device add laptop --family smiths --hub nats://hub.home.arpa:4222
              permission-relay device add tablet UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4 --family smiths \\
                --hub nats://hub.home.arpa:4222
            """,
        run: { args in
            let a = try Arguments(args, valueFlags: ["--family", "--hub", "--keys", "--data"], switchFlags: [])
            let p = a.positionals
            guard p.count == 1 || p.count == 2 else { throw CLIError.usage("device add takes NAME and, for another device, its KEY") }
            let (name, family) = (p[0], try familyOption(a))
            guard Identifier.isValid(name) else { throw CLIError.usage("NAME must be 1 to 64 letters, digits, '.', '_' or '-'") }
            let keys = try failure { try HubKeys(directory: a.value("--keys") ?? HubPaths.defaultKeys) }
            let data = a.value("--data") ?? Paths.defaultData
            let own = p.count == 1 ? try HubPaths.deviceKey(data: data) : nil
            let names = HubFamilyNames(
                stream: HubNames.stream(family: family), subjects: HubNames.all(family: family), consumer: HubNames.consumer(device: name))
            let hub = try hubURL(a)
            let device = try onHub(hub, keys) { held, push in
                try keys.addDevice(name, publicKey: own?.publicKey ?? p[1], family: family, names: names, held: held, push: push)
            }
            if let own {
                try HubPaths.join(device, key: own, data: data)
                printOut("paired this device as \(name) of family \(family); \(HubPaths.takenBy)")
            } else {
                printOut(
                    """
                    paired \(name) of family \(family); on \(name), run:
                      permission-relay device join \(device.text)
                    """)
            }
        })

    static let join = HubCommand(
        words: ["device", "join"], summary: "Take the token `device add` printed for this device.",
        usage: """
            OVERVIEW: Take the token `permission-relay device add` printed for this device: the
            relay's --hub then links its family with this device's key: at once for a relay
            already linked as this device, else when it is started with --hub.

            USAGE: permission-relay device join TOKEN [--data DIR]

            OPTIONS:
            \(dataOption)
              -h, --help      Show this help.

            EXAMPLES:
              permission-relay device join eyJhbGciOiJlZDI1NTE5LW5rZXkiLCJ0eXAiOiJKV1QifQ…
            """,
        run: { args in
            let a = try Arguments(args, valueFlags: ["--data"], switchFlags: [])
            let token = try a.expectPositionals(["TOKEN"])[0]
            let data = a.value("--data") ?? Paths.defaultData
            let jwt: HubJWT
            do {
                jwt = try HubJWT(token)
            } catch {
                throw CLIError.failure(
                    "TOKEN is not a device's token (\(error)): give the one `permission-relay device add` printed for this device")
            }
            guard let family = jwt.family else { throw CLIError.failure("this token is not a device's (it names no family)") }
            let key = try HubPaths.deviceKey(data: data)
            guard jwt.subject == key.publicKey else {
                throw CLIError.failure(
                    "this token is for the key \(jwt.subject), and this device's key is \(key.publicKey): pair this device with its own key"
                )
            }
            try HubPaths.join(jwt, key: key, data: data)
            printOut("joined family \(family) as \(jwt.name); \(HubPaths.takenBy)")
        })

    static let remove = HubCommand(
        words: ["device", "remove"], summary: "Cut a device off its family on the hub, at once.",
        usage: """
            OVERVIEW: Cut a device off: the hub stops trusting its key at once and closes its
            connections. Its relay keeps serving its own apps. Run where the hub's keys are.

            USAGE: permission-relay device remove NAME --family FAMILY [--hub URL] [--keys DIR]

            OPTIONS:
              --family FAMILY The device's family
            \(hubOption)
            \(keysOption)
              -h, --help      Show this help.

            EXAMPLES:
              permission-relay device remove tablet --family smiths --hub nats://hub.home.arpa:4222
            """,
        run: { args in
            let a = try Arguments(args, valueFlags: ["--family", "--hub", "--keys"], switchFlags: [])
            let name = try a.expectPositionals(["NAME"])[0]
            let family = try familyOption(a)
            let keys = try failure { try HubKeys(directory: a.value("--keys") ?? HubPaths.defaultKeys) }
            let hub = try hubURL(a)
            try onHub(hub, keys) { held, push in
                try keys.removeDevice(name, family: family, held: held, push: push)
            }
            printOut("removed \(name) from family \(family): the hub no longer trusts it")
        })

    static let list = HubCommand(
        words: ["device", "list"], summary: "List a family's devices.",
        usage: """
            OVERVIEW: List a family's devices paired with these keys: name, whether paired or
            removed, since when, key. With --hub, a device removed with another copy of the keys
            shows as removed too.

            USAGE: permission-relay device list --family FAMILY [--keys DIR] [--hub URL] [--json]

            OPTIONS:
              --family FAMILY The family
            \(keysOption)
              --hub URL       Ask the hub which devices it no longer trusts (default: only what
                              these keys know)
              --json          One JSON array: name, status (paired or removed), since, key
              -h, --help      Show this help.

            EXAMPLES:
              permission-relay device list --family smiths
              permission-relay device list --family smiths --hub nats://hub.home.arpa:4222 --json
            """,
        run: { args in
            let a = try Arguments(args, valueFlags: ["--family", "--keys", "--hub"], switchFlags: ["--json"])
            _ = try a.expectPositionals([])
            let family = try familyOption(a)
            let keys = try failure { try HubKeys(directory: a.value("--keys") ?? HubPaths.defaultKeys) }
            var held: (String) throws -> HubJWT? = { _ in nil }
            if let url = a.value("--hub") {
                let hub: HubConnection
                do {
                    hub = try adminConnection(url, keys)
                } catch {
                    throw CLIError.failure(
                        "the hub at \(HubConnection.redacted(url)) cannot be reached (\(error)): run the command again once it is,"
                            + " or without --hub for what these keys know")
                }
                held = { try hub.heldAccount($0) }
            }
            let devices = try failure { try keys.devices(of: family, held: held) }
            typealias Device = (name: String, publicKey: String, added: Int64, removedAt: Int64?)
            func status(_ d: Device) -> String { d.removedAt != nil ? "removed" : "paired" }
            func since(_ d: Device) -> String { Timestamp(milliseconds: (d.removedAt ?? d.added) * 1000).rfc3339 }
            if a.has("--json") {
                let list = devices.map { d -> JSON in
                    .object([
                        "name": .string(d.name), "status": .string(status(d)),
                        "since": .string(since(d)), "key": .string(d.publicKey),
                    ])
                }
                return printOut(JSON.array(list).text)
            }
            guard !devices.isEmpty else {
                printOut("family \(family) has no devices (pair one with `permission-relay device add`)")
                return
            }
            for d in devices {
                printOut("\(d.name)\t\(status(d))\t\(since(d))\t\(d.publicKey)")
            }
        })

    private static func familyOption(_ a: Arguments) throws -> String {
        guard let family = a.value("--family") else { throw CLIError.usage("--family FAMILY is required") }
        guard Identifier.isValid(family) else { throw CLIError.usage("--family must be 1 to 64 letters, digits, '.', '_' or '-'") }
        return family
    }

    /// Gives the hub the family's account as now signed.
    private static func hubURL(_ a: Arguments) throws -> String {
        guard let url = a.value("--hub") ?? ProcessInfo.processInfo.environment["PERMISSION_RELAY_HUB"].flatMap({ $0.isEmpty ? nil : $0 })
        else { throw CLIError.usage("--hub URL is required (or $PERMISSION_RELAY_HUB): the hub must be told") }
        return url
    }

    /// A connection to the hub at `url` with the hub's admin credentials, kept with `keys`.
    private static func adminConnection(_ url: String, _ keys: HubKeys) throws -> HubConnection {
        try HubConnection(url: url, name: "permission-relay admin", credentials: keys.adminCredentials, timeoutMillis: 5000)
    }

    /// Runs a change of a family's account on the hub at `url`: `change` is given the
    /// account as the hub holds it (`held`) and gives it the new one (`push`), over one
    /// admin connection, made when first needed. A hub that cannot be reached or told fails
    /// the command, saying that nothing changed and what to do.
    private static func onHub<T>(
        _ url: String, _ keys: HubKeys,
        _ change: (_ held: (String) throws -> HubJWT?, _ push: (HubJWT) throws -> Void) throws -> T
    ) throws -> T {
        var hub: HubConnection?
        /// Runs `body` on the admin connection; a failure is the command's, saying what did not happen.
        func onConnection<R>(_ what: String, _ body: (HubConnection) throws -> R) throws -> R {
            do {
                let c = try hub ?? adminConnection(url, keys)
                hub = c
                return try body(c)
            } catch {
                throw CLIError.failure(
                    "the hub could not be \(what) (\(error)); nothing changed: run the command again once the hub at"
                        + " \(HubConnection.redacted(url)) is reachable")
            }
        }
        return try failure {
            try change({ account in try onConnection("asked for the family's account") { try $0.heldAccount(account) } }) { account in
                try onConnection("told") { try $0.push(account: account) }
            }
        }
    }

}

/// Runs `body`, its error a failure (exit 1) with its own text.
private func failure<T>(_ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch let e as CLIError {
        throw e
    } catch {
        throw CLIError.failure("\(error)")
    }
}

enum HubPaths {
    /// `$XDG_CONFIG_HOME/permission-relay/hub`, else `~/.config/permission-relay/hub`.
    static var defaultKeys: String {
        RelayDefaults.baseDirectory("XDG_CONFIG_HOME", else: ".config") + "/permission-relay/hub"
    }

    /// The device's credentials for its hub, where `serve --hub` looks for them.
    static func credentials(data: String) -> String { data + "/hub.creds" }

    /// Which relay uses credentials just written, and when.
    static let takenBy = "a relay already linked as this device takes them at once, any other when started with --hub"

    /// Where this device's key is kept.
    static func deviceKeyPath(data: String) -> String { data + "/hub-device.nk" }

    /// This device's key, made on first use (hub-device.nk in the data directory).
    static func deviceKey(data given: String) throws -> NKey {
        let data = try Paths.makePrivateDirectory(given)
        let path = deviceKeyPath(data: data)
        if let text = try? String(contentsOfFile: path, encoding: .utf8) {
            do {
                return try NKey(seed: text)
            } catch {
                throw CLIError.failure("\(path) is damaged (\(error)): remove it, then pair the device again")
            }
        }
        let key = try NKey.generate(.user)
        try failure { try HubKeys.writePrivate(path, key.seed + "\n") }
        return key
    }

    /// Writes the device's credentials: its signed JWT and its seed.
    static func join(_ jwt: HubJWT, key: NKey, data: String) throws {
        let path = credentials(data: try Paths.makePrivateDirectory(data))
        try failure { try HubKeys.writePrivate(path, HubCredentials.text(jwt: jwt, seed: key)) }
    }
}
