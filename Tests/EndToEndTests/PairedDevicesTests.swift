// Devices paired with their family on a hub in operator mode, as a user does it with the
// release binary: `hub init`, `device key` on the tablet, `device add` where the hub's
// keys are, `device join` on the tablet; then a question crosses, and `device remove`
// cuts the tablet off.

import Foundation
import RelayHub
import RelayProtocol
import XCTest

final class PairedDevicesTests: XCTestCase {
    private var dir = ""

    override func setUpWithError() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("paired-\(UUID().uuidString.prefix(8))").path
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Runs `permission-relay ARGS`; fails the test unless it exits 0. Returns its output.
    @discardableResult
    private func relay(_ args: [String], file: StaticString = #filePath, line: UInt = #line) -> String {
        let (status, output) = runToEnd(process([relayBinary] + args, environment: ["PATH": "/usr/bin:/bin"]))
        XCTAssertEqual(status, 0, "permission-relay \(args.joined(separator: " ")): \(output)", file: file, line: line)
        return output
    }

    func testAPairedTabletAndLaptopShareAFamilyUntilTheTabletIsRemoved() throws {
        let keys = dir + "/hub-keys"
        let hub = try NATSServer { port, store in
            self.relay(["hub", "init", keys, "--listen", "127.0.0.1:\(port)", "--store", store.path])
            return keys + "/hub.conf"
        }
        let tablet = try RelayProcess(flags: ["--ask-rate-limit", "0", "--hub", hub.url])
        let laptop = try RelayProcess(flags: ["--ask-rate-limit", "0", "--hub", hub.url])

        // The tablet makes its key; the owner signs it; the tablet joins with the token.
        let key = relay(["device", "key", "--data", tablet.data]).trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertTrue(key.hasPrefix("U") && key.count == 56, key)
        XCTAssertEqual(relay(["device", "key", "--data", tablet.data]).trimmingCharacters(in: .whitespacesAndNewlines), key, "made once")
        let added = relay(["device", "add", "tablet", key, "--family", "f0", "--hub", hub.url, "--keys", keys])
        let token = try XCTUnwrap(added.split(separator: " ").last { $0.hasPrefix("ey") }).trimmingCharacters(in: .whitespacesAndNewlines)
        let (refused, why) = runToEnd(process([relayBinary, "device", "join", token, "--data", laptop.data], environment: [:]))
        XCTAssertEqual(refused, 1, "another device cannot take the tablet's token")
        XCTAssertTrue(why.contains("this device's key is"), why)
        relay(["device", "join", token, "--data", tablet.data])
        // The laptop is where the keys are: it pairs itself.
        relay(["device", "add", "laptop", "--family", "f0", "--hub", hub.url, "--keys", keys, "--data", laptop.data])
        let listed = relay(["device", "list", "--family", "f0", "--keys", keys])
        XCTAssertTrue(listed.contains("laptop\tpaired") && listed.contains("tablet\tpaired"), listed)

        try tablet.start()
        try laptop.start()
        let tokens = [try tablet.provision(families: 1), try laptop.provision(families: 1)]
        let child = try tablet.connect()
        _ = try child.hello("c0", tokens[0]["c0"]!, session: "app")
        _ = try child.request(["type": "subscribe", "topics": ["communication"]])
        let guardian = try laptop.connect()
        _ = try guardian.hello("g0", tokens[1]["g0"]!)
        let id = UUID().uuidString
        XCTAssertEqual(try child.request(["type": "ask", "question": question(id)])["type"]?.string, "ok")
        XCTAssertEqual(try guardian.event("question")["question"]?["id"]?.string, id, "the question crossed to the laptop")
        XCTAssertEqual(try guardian.request(["type": "answer", "questionId": .string(id), "choice": "approve"])["type"]?.string, "ok")
        XCTAssertEqual(try child.event("response")["guardian"]?.string, "g0")
        XCTAssertEqual(try tablet.admin().request(["type": "status"])["hub"]?["device"]?.string, "tablet", "named as paired")

        // Removed, the tablet is cut off: its link goes down and stays down, and what it
        // asks waits in its outbox.
        relay(["device", "remove", "tablet", "--family", "f0", "--hub", hub.url, "--keys", keys])
        XCTAssertTrue(relay(["device", "list", "--family", "f0", "--keys", keys]).contains("tablet\tremoved"))
        XCTAssertTrue(relay(["device", "list", "--family", "f0", "--keys", keys, "--hub", hub.url]).contains("tablet\tremoved"))
        let (unreached, unreachedSaid) = runToEnd(
            process([relayBinary, "device", "list", "--family", "f0", "--keys", keys, "--hub", "nats://127.0.0.1:1"], environment: [:]))
        XCTAssertEqual(unreached, 1)
        XCTAssertTrue(unreachedSaid.contains("cannot be reached") && unreachedSaid.contains("without --hub"), unreachedSaid)
        let laptopKey = relay(["device", "key", "--data", laptop.data]).trimmingCharacters(in: .whitespacesAndNewlines)
        let listedAsJSON = try JSON.parse(relay(["device", "list", "--family", "f0", "--keys", keys, "--json"])).array ?? []
        XCTAssertEqual(
            listedAsJSON.map { "\($0["name"]?.string ?? "") \($0["status"]?.string ?? "") \($0["key"]?.string ?? "")" }.sorted(),
            ["laptop paired \(laptopKey)", "tablet removed \(key)"])
        let admin = try tablet.admin()
        let deadline = Date().addingTimeInterval(20)
        while try admin.request(["type": "status"])["hub"]?["trusted"]?.bool != false {
            guard Date() < deadline else { return XCTFail("the removed tablet does not know it is refused after 20 s") }
            usleep(50_000)
        }
        XCTAssertEqual(try admin.request(["type": "status"])["hub"]?["connected"]?.bool, false)
        let said = relay(["status", "--socket", tablet.socket])
        XCTAssertTrue(said.contains("hub connected: false\n") && said.contains("hub inbox: unknown\n"), said)
        // Its child's program says why its question waits.
        let asked = runToEnd(
            process(
                [
                    productsDirectory.appendingPathComponent("permission-child").path, "ask", "+1 555 0140", "--member", "c0", "--token",
                    tokens[0]["c0"]!,
                ],
                environment: ["PERMISSION_RELAY_SOCKET": tablet.socket, "PERMISSION_STATE_DIR": dir + "/state"]))
        XCTAssertEqual(asked.status, 0, asked.output)
        XCTAssertTrue(asked.output.contains("the family hub no longer trusts this device"), asked.output)
        let waiting = UUID().uuidString
        XCTAssertEqual(try child.request(["type": "ask", "question": question(waiting)])["type"]?.string, "ok")
        XCTAssertEqual(try admin.request(["type": "status"])["hub"]?["outbox"]?.int, 2)
        XCTAssertEqual(try admin.request(["type": "status"])["hub"]?["connected"]?.bool, false)

        // Paired again, it links again without a restart, and what waited goes out.
        let again = relay(["device", "add", "tablet", key, "--family", "f0", "--hub", hub.url, "--keys", keys])
        relay([
            "device", "join",
            try XCTUnwrap(again.split(separator: " ").last { $0.hasPrefix("ey") }).trimmingCharacters(in: .whitespacesAndNewlines),
            "--data", tablet.data,
        ])
        // Both questions asked while it was removed come (the program's, then this one).
        let came = try (0..<2).map { _ in try guardian.event("question")["question"]?["id"]?.string }
        XCTAssertEqual(came.last, waiting, "\(came)")
    }

    func testDeviceCommandsSayWhatIsMissing() throws {
        let (status, output) = runToEnd(
            process(
                [relayBinary, "device", "add", "tablet", "--family", "f0", "--hub", "nats://127.0.0.1:1", "--keys", dir + "/none"],
                environment: [:]))
        XCTAssertEqual(status, 1)
        XCTAssertTrue(output.contains("holds no hub's keys") && output.contains("hub init"), output)
        let (usage, text) = runToEnd(process([relayBinary, "device", "add", "tablet"], environment: [:]))
        XCTAssertEqual(usage, 64)
        XCTAssertTrue(text.contains("--family"), text)
        let (unknown, said) = runToEnd(process([relayBinary, "device", "pair"], environment: [:]))
        XCTAssertEqual(unknown, 64)
        XCTAssertTrue(said.contains("device commands: key, add, join, remove, list"), said)
        let (_, help) = runToEnd(process([relayBinary, "device", "--help"], environment: [:]))
        XCTAssertTrue(help.contains("device add"), help)
        let (garbage, joined) = runToEnd(process([relayBinary, "device", "join", "garbage", "--data", dir + "/data"], environment: [:]))
        XCTAssertEqual(garbage, 1)
        XCTAssertTrue(joined.contains("TOKEN is not a device's token") && joined.contains("`permission-relay device add` printed"), joined)

        // A hub that cannot be told: nothing changes, and the command says so.
        relay(["hub", "init", dir + "/keys"])
        let key = try NKey.generate(.user).publicKey
        let (unpaired, why) = runToEnd(
            process(
                [relayBinary, "device", "add", "tablet", key, "--family", "f0", "--hub", "nats://127.0.0.1:1", "--keys", dir + "/keys"],
                environment: [:]))
        XCTAssertEqual(unpaired, 1)
        XCTAssertTrue(why.contains("nothing changed: run the command again"), why)
        XCTAssertTrue(relay(["device", "list", "--family", "f0", "--keys", dir + "/keys"]).contains("has no devices"))
        let (refused, again) = runToEnd(process([relayBinary, "hub", "init", dir + "/keys"], environment: [:]))
        XCTAssertEqual(refused, 1)
        XCTAssertTrue(again.contains("already holds a hub's keys"), again)

        // A device key without credentials: the relay links to a hub open to all, and says so.
        let keyed = try RelayProcess(flags: ["--hub", "nats://127.0.0.1:1"])
        relay(["device", "key", "--data", keyed.data])
        try keyed.start()
        let log = try String(contentsOf: keyed.logFile, encoding: .utf8)
        XCTAssertTrue(log.contains("hub.creds is missing") && log.contains("pair it again"), log)
        XCTAssertEqual(keyed.terminate(), 0)

        // Another device's credentials copied in beside this device's key: refused, with what to do.
        let other = try NKey.generate(.user)
        let names = HubFamilyNames(stream: "s", subjects: "s.>", consumer: "c")
        let jwt = try HubKeys(directory: dir + "/keys").addDevice("laptop", publicKey: other.publicKey, family: "f0", names: names) { _ in }
        try HubKeys.writePrivate(keyed.data + "/hub.creds", HubCredentials.text(jwt: jwt, seed: other))
        let serve = [relayBinary, "serve", "--data", keyed.data, "--socket", dir + "/s.sock", "--hub", "nats://127.0.0.1:1"]
        let (copied, refusal) = runToEnd(process(["/usr/bin/timeout", "10"] + serve, environment: [:]))  // not left serving
        XCTAssertEqual(copied, 1)
        XCTAssertTrue(refusal.contains("hub.creds is laptop's, not this device's") && refusal.contains("device join"), refusal)
    }
}
