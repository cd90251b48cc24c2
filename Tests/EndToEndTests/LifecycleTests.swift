// Start, stop, restart and refusal of the real binary; the command line.

import CSQLite
import CSystem
import Foundation
import RelayProtocol
import RelayServer
import XCTest

final class LifecycleTests: XCTestCase {
    func testSigtermExitsZeroAndRemovesTheSocket() throws {
        let relay = try RelayProcess()
        try relay.start()
        XCTAssertTrue(relay.output.contains(relay.socket), "it prints where it listens")
        let tokens = try relay.provision(families: 1)
        let c = try relay.connect()
        _ = try c.hello("c0", tokens["c0"]!)
        XCTAssertEqual(relay.terminate(), 0)
        XCTAssertFalse(FileManager.default.fileExists(atPath: relay.socket))
        var rest: [JSONObject] = []
        while let f = try c.c.receive() { rest.append(f) }
        XCTAssertEqual(rest.last?["reason"]?.string, "shutdown")
    }

    /// Events queued for a guardian beyond what its socket holds still reach it when the
    /// relay stops while it reads, and then the goodbye.
    func testAStopDeliversWhatIsQueuedToAClientThatKeepsReading() throws {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let guardian = try relay.connect()
        _ = try guardian.hello("g0", tokens["g0"]!)
        let child = try relay.connect()
        _ = try child.hello("c0", tokens["c0"]!)
        let avatar = String(repeating: "A", count: 200_000)  // base64: 150 KB each
        let asked = 12
        for n in 0..<asked {
            let person: JSON = .object([
                "handle": .object(["value": .string("+1 555 01\(10 + n)"), "kind": "phoneNumber"]), "avatarImage": .string(avatar),
            ])
            let topic: JSON = .object(["kind": "communication", "personInformation": .array([person])])
            let reply = try child.request(["type": "ask", "question": .object(["id": .string(UUID().uuidString), "topic": topic])])
            XCTAssertEqual(reply["type"]?.string, "ok", "\(reply)")
        }
        // 1.8 MB of question events wait for the guardian, who has read nothing yet.
        guard let pid = relay.process?.processIdentifier else { return XCTFail("no relay") }
        kill(pid, SIGTERM)
        var questions = 0
        var last: JSONObject?
        while let f = try guardian.c.receive() {
            if f["type"]?.string == "question" { questions += 1 }
            last = f
        }
        XCTAssertEqual(questions, asked, "every question event queued when the relay stopped")
        XCTAssertEqual(last?["reason"]?.string, "shutdown")
        XCTAssertEqual(relay.terminate(), 0)
    }

    /// A stop asked for while the relay loads its store waits until it serves, then ends it
    /// cleanly (exit 0), not by the signal's default (143) in the middle of opening the store.
    func testSIGTERMWhileTheStoreLoadsStopsCleanlyOnceItServes() throws {
        let relay = try RelayProcess()
        try relay.start()
        _ = try relay.provision(families: 1)
        XCTAssertEqual(relay.terminate(), 0)
        // 300,000 known handles of c0: seconds of loading, a wide window to stop it in.
        let fill = """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000)
            INSERT INTO knownHandles(row, child, kind, value, permanent, until, actions)
            SELECT i, 'c0', 'phoneNumber', '+1555' || i, 1, NULL, '["message"]' FROM n
            """
        execSQL(fill, in: relay.data + "/relay.db")
        let p = Process()
        p.executableURL = URL(fileURLWithPath: relayBinary)
        p.arguments = ["serve", "--socket", relay.socket, "--data", relay.data]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        // Once it has the store open, it is loading it (it listens only after).
        let deadline = Date().addingTimeInterval(20)
        func opened() -> Bool {
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(p.processIdentifier)/fd")) ?? []
            return fds.contains {
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(p.processIdentifier)/fd/\($0)"))?.hasSuffix(
                    "/relay.db") == true
            }
        }
        while !opened() && Date() < deadline { usleep(2_000) }
        kill(p.processIdentifier, SIGTERM)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationReason, .exit, "ended by the signal's default")
        XCTAssertEqual(p.terminationStatus, 0)
        XCTAssertTrue(String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).contains("listening on"))
    }

    func testStaleSocketDoesNotBlockARestartAndALiveOneRefusesASecondRelay() throws {
        let relay = try RelayProcess()
        try relay.start()
        _ = try relay.provision(families: 1)
        relay.crash()
        XCTAssertTrue(FileManager.default.fileExists(atPath: relay.socket), "SIGKILL leaves the socket file")
        try relay.start()
        let st = try relay.admin().request(["type": "status"])
        XCTAssertEqual(st["families"]?.int, 1)

        let second = runRelay(["serve", "--socket", relay.socket, "--data", relay.dir.appendingPathComponent("other").path])
        XCTAssertEqual(second.status, 1)
        XCTAssertTrue(second.stderr.contains("already serving"), second.stderr)
        XCTAssertFalse(
            FileManager.default.fileExists(atPath: relay.dir.appendingPathComponent("other").path), "refused before making a store")
        let sameData = runRelay(["serve", "--socket", relay.dir.appendingPathComponent("s2").path, "--data", relay.data])
        XCTAssertEqual(sameData.status, 1)
        XCTAssertTrue(sameData.stderr.contains("data directory"), sameData.stderr)
    }

    /// A socket path longer than a Unix socket's address holds is refused before anything
    /// is made: no data directory, no store, no socket directory.
    func testASocketPathTooLongIsRefusedBeforeAnythingIsMade() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("long-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: dir) }
        let socket = dir.appendingPathComponent(String(repeating: "s", count: 120)).appendingPathComponent("relay.sock").path
        let r = runRelay(["serve", "--socket", socket, "--data", dir.appendingPathComponent("data").path])
        XCTAssertEqual(r.status, 1)
        XCTAssertEqual(
            r.stderr, "permission-relay: the socket path is too long (\(socket.utf8.count) bytes, at most 107): choose a shorter --socket\n"
        )
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.path), "nothing is made")
    }

    /// A process that listens on the socket but accepts nothing (a wedged relay, its backlog
    /// full) still has it: the relay refuses at once, rather than wait for it to accept.
    func testASocketWhoseListenerNeverAcceptsIsRefusedAtOnce() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("wedged-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("s").path
        let listener = cs_listen_unix(path, 0)
        XCTAssertGreaterThanOrEqual(listener, 0)
        defer { close(listener) }
        var queued: [Int32] = []  // connections the listener never accepts, until its backlog is full
        defer { queued.forEach { close($0) } }
        while queued.count < 64 {
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            let rc = withUnixAddress(path) { connect(fd, $0, $1) }
            queued.append(fd)
            if rc != 0 { break }  // EAGAIN: the backlog is full
        }
        let r = runRelay(["serve", "--socket", path, "--data", dir.appendingPathComponent("data").path])
        XCTAssertEqual(r.status, 1, r.stderr)
        XCTAssertTrue(r.stderr.contains("already serving"), r.stderr)
    }

    func testAFileThatIsNotASocketIsNeverRemoved() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("not-a-socket-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let notes = dir.appendingPathComponent("notes.txt").path
        try "precious".write(toFile: notes, atomically: true, encoding: .utf8)
        let link = dir.appendingPathComponent("link.sock").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: notes)
        for path in [notes, link] {
            let r = runRelay(["serve", "--socket", path, "--data", dir.appendingPathComponent("data").path])
            XCTAssertEqual(r.status, 1, r.stderr)
            XCTAssertTrue(r.stderr.contains("\(path) exists and is not a socket"), r.stderr)
        }
        XCTAssertEqual(try String(contentsOfFile: notes, encoding: .utf8), "precious")
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: link), notes)
    }

    /// A user's relay keeps its socket to that user (0600); root's is the machine's, open to
    /// every account (0666), as its systemd socket is.
    func testAUsersSocketIsItsOwnAndRootsIsForEveryAccount() throws {
        func mode(_ path: String) -> mode_t {
            var st = stat()
            return stat(path, &st) == 0 ? st.st_mode & 0o777 : 0
        }
        let relay = try RelayProcess()
        try relay.start()
        defer { relay.crash() }
        XCTAssertEqual(mode(relay.socket), geteuid() == 0 ? 0o666 : 0o600)
        let chosen = try RelayProcess(flags: ["--socket-mode", "0660"])
        try chosen.start()
        defer { chosen.crash() }
        XCTAssertEqual(mode(chosen.socket), 0o660)
        for bad in ["0066", "8", "1777", "rw"] {
            let r = runRelay(["serve", "--socket-mode", bad, "--socket", relay.dir.path + "/bad.sock", "--data", relay.dir.path + "/bad"])
            XCTAssertEqual(r.status, 64, bad)
            XCTAssertTrue(r.stderr.contains("--socket-mode must be octal permissions"), r.stderr)
        }
        guard geteuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else { return }
        let dir = relay.dir.appendingPathComponent("nobody").path
        XCTAssertEqual(mkdir(dir, 0o700), 0)
        XCTAssertEqual(chown(dir, 65534, 65534), 0)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        p.arguments = [
            "--reuid=65534", "--regid=65534", "--clear-groups", relayBinary, "serve", "--socket", dir + "/s", "--data", dir + "/d",
        ]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let said = String(decoding: out.fileHandleForReading.availableData, as: UTF8.self)  // its first line, or EOF
        XCTAssertTrue(said.contains("listening on \(dir)/s "), said)
        XCTAssertEqual(mode(dir + "/s"), 0o600)
        kill(p.processIdentifier, SIGTERM)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0)
    }

    func testASocketNamedWithoutADirectoryIsMadeInTheWorkingDirectory() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bare-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(at: dir) }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: relayBinary)
        p.arguments = ["serve", "--socket", "relay.sock", "--data", "data"]
        p.currentDirectoryURL = dir
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        let said = String(decoding: out.fileHandleForReading.availableData, as: UTF8.self)  // its first line, or EOF
        XCTAssertTrue(said.contains("listening on \(dir.path)/relay.sock "), said)
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir.appendingPathComponent("relay.sock").path))
        kill(p.processIdentifier, SIGTERM)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))
        let empty = runRelay(["serve", "--socket", "", "--data", dir.appendingPathComponent("data").path])
        XCTAssertEqual(empty.status, 64, "an empty name would listen outside the file system, open to all")
        XCTAssertTrue(empty.stderr.contains("--socket needs a value, not an empty one"), empty.stderr)
    }

    func testARelayStoppingLeavesAnotherRelaysSocketInItsPlace() throws {
        let first = try RelayProcess()
        try first.start()
        try FileManager.default.removeItem(atPath: first.socket)  // as a cleaner of /tmp might
        let second = try RelayProcess(socket: first.socket)
        try second.start()
        XCTAssertEqual(first.terminate(), 0)
        XCTAssertEqual(try second.admin().request(["type": "status"])["type"]?.string, "ok", "the second relay is still reachable")
        XCTAssertEqual(second.terminate(), 0)
        XCTAssertFalse(FileManager.default.fileExists(atPath: first.socket), "the second removes its own")
    }

    func testHelpUsageErrorsAndAdminCommands() throws {
        for words in [
            ["--help"], ["serve", "--help"], ["family", "create", "--help"], ["member", "add", "--help"],
            ["member", "remove", "--help"], ["token", "rotate", "--help"], ["limits", "set", "--help"], ["status", "--help"],
            ["backup", "--help"], ["restore", "--help"], ["check", "--help"], ["hub", "--help"], ["hub", "init", "--help"],
            ["device", "--help"], ["device", "add", "--help"],
        ] {
            let r = runRelay(words)
            XCTAssertEqual(r.status, 0, words.joined(separator: " "))
            XCTAssertTrue(r.stdout.contains("USAGE:") && r.stdout.contains("EXAMPLES:"), words.joined(separator: " "))
        }
        let version = runRelay(["--version"])
        XCTAssertEqual(version.status, 0)
        XCTAssertTrue(version.stdout.hasPrefix("permission-relay 0.1.0 (wire protocol 1)"), version.stdout)
        XCTAssertEqual(runRelay([]).status, 64)
        XCTAssertEqual(runRelay(["frobnicate"]).status, 64)
        XCTAssertEqual(runRelay(["serve", "--sync", "sometimes"]).status, 64)
        for spin in ["-1", "10001", "soon"] {
            let r = runRelay(["serve", "--spin-microseconds", spin])
            XCTAssertEqual(r.status, 64, spin)
            XCTAssertTrue(r.stderr.contains("--spin-microseconds"), r.stderr)
            // One line: the problem, and where help is; not buried under the usage.
            XCTAssertTrue(r.stderr.hasPrefix("permission-relay: --spin-microseconds"), r.stderr)
            XCTAssertTrue(r.stderr.hasSuffix("(see `permission-relay serve --help`)\n"), r.stderr)
            XCTAssertEqual(r.stderr.filter { $0 == "\n" }.count, 1, r.stderr)
        }
        // Values whose milliseconds would overflow once serving are refused before it.
        for (flag, value) in [
            ("--handshake-timeout-seconds", "1e16"), ("--heartbeat-seconds", "10000000000000000"),
            ("--retention-seconds", "9223372036854775807"), ("--max-frame-bytes", "9223372036854775807"),
        ] {
            let r = runRelay(["serve", flag, value])
            XCTAssertEqual(r.status, 64, "\(flag) \(value): \(r.stderr)")
            XCTAssertTrue(r.stderr.hasPrefix("permission-relay: \(flag) must be a "), r.stderr)
        }
        XCTAssertTrue(runRelay([]).stderr.contains("no command given: serve, family"), "no command: the commands are named")
        XCTAssertEqual(runRelay(["member", "add", "fam"]).status, 64)
        let down = runRelay(["status", "--socket", "/tmp/no-such-relay.sock"])
        XCTAssertEqual(down.status, 1)
        XCTAssertTrue(down.stderr.contains("cannot connect"), down.stderr)

        let relay = try RelayProcess()
        try relay.start()
        let s = ["--socket", relay.socket]
        XCTAssertEqual(runRelay(["family", "create", "smiths"] + s).status, 0)
        let added = runRelay(["member", "add", "smiths", "alex", "--role", "child", "--json"] + s)
        XCTAssertEqual(added.status, 0)
        let token = try JSON.parse(added.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["token"]?.string
        XCTAssertEqual(token?.count, 43)
        XCTAssertEqual(runRelay(["member", "add", "smiths", "sam", "--role", "guardian"] + s).status, 0)
        let dup = runRelay(["family", "create", "smiths"] + s)
        XCTAssertEqual(dup.status, 1)
        XCTAssertTrue(dup.stderr.contains("conflict"), dup.stderr)
        XCTAssertEqual(runRelay(["limits", "set", "alex", "off"] + s).status, 0)
        XCTAssertEqual(runRelay(["limits", "set", "alex", "maybe"] + s).status, 64)
        let rotated = runRelay(["token", "rotate", "alex", "--json"] + s)
        XCTAssertNotEqual(try JSON.parse(rotated.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["token"]?.string, token)
        let status = runRelay(["status", "--json"] + s)
        XCTAssertEqual(try JSON.parse(status.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["members"]?.int, 2)
        XCTAssertEqual(runRelay(["member", "remove", "alex"] + s).status, 0)
        XCTAssertEqual(runRelay(["member", "remove", "alex"] + s).status, 1)
    }
}

final class LimitFlagTests: XCTestCase {
    /// Each bound of the command line reaches the running relay.
    func testLimitFlags() throws {
        let relay = try RelayProcess(flags: [
            "--max-pending-per-child", "1", "--ask-rate-limit", "0", "--max-frame-bytes", "4096",
            "--max-connections", "4", "--handshake-timeout-seconds", "1", "--heartbeat-seconds", "7",
        ])
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let c = try relay.connect()
        let w = try c.hello("c0", tokens["c0"]!)
        XCTAssertEqual(w["maxFrameBytes"]?.int, 4096)
        XCTAssertEqual(w["heartbeatSeconds"]?.int, 7)
        XCTAssertEqual(try c.request(["type": "ask", "question": question()])["type"]?.string, "ok")
        XCTAssertEqual(try c.request(["type": "ask", "question": question()])["code"]?.string, "tooManyPending")
        try c.c.sendRaw([0, 0, 0x10, 0x01])
        var last: JSONObject?
        while let f = try c.c.receive() { last = f }
        XCTAssertEqual(last?["code"]?.string, "frameTooLarge")

        let silent = try relay.connect()  // says nothing: closed after the handshake timeout
        XCTAssertNil(try silent.c.receiveSkippingClosing())
        let held = try (0..<4).map { _ in try relay.connect() }
        var refused: JSONObject?
        let extra = try relay.connect()
        while let f = try extra.c.receive() { refused = f }
        XCTAssertEqual(refused?["code"]?.string, "busy")
        // An admin command refused so says why, not only that the connection closed.
        let status = runRelay(["status", "--socket", relay.socket])
        XCTAssertEqual(status.status, 1)
        XCTAssertTrue(
            status.stderr.contains("the relay refused the connection (busy): the relay is at its connection limit (4)"), status.stderr)
        _ = held
    }

    func testSessionQuestionSizeAndKnownHandleFlags() throws {
        let relay = try RelayProcess(flags: [
            "--ask-rate-limit", "0", "--max-sessions-per-member", "1", "--max-question-bytes-per-child", "1",
            "--max-known-handles-per-child", "1",
        ])
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let first = try relay.connect()
        _ = try first.hello("g0", tokens["g0"]!, session: "phone")
        let second = try relay.connect()
        try second.send(["type": "hello", "id": "h", "protocol": 1, "member": "g0", "token": .string(tokens["g0"]!), "session": "pad"])
        XCTAssertEqual(try second.c.receive()?["code"]?.string, "busy", "one session, and it is open")
        let two: JSON = .array(["+1 555 0101", "+1 555 0102"].map { .object(["value": .string($0), "kind": "phoneNumber"]) })
        let refused = try first.request(["type": "addKnownHandles", "child": "c0", "handles": two])
        XCTAssertEqual(refused["code"]?.string, "badRequest", "one known handle per child: \(refused)")

        let c = try relay.connect()
        _ = try c.hello("c0", tokens["c0"]!)
        let cancelled = try (0..<2).map { _ in
            let q = question()
            XCTAssertEqual(try c.request(["type": "ask", "question": q])["type"]?.string, "ok")
            XCTAssertEqual(try c.request(["type": "cancel", "questionId": q["id"]!])["type"]?.string, "ok")
            return q
        }
        let pending = question()
        XCTAssertEqual(try c.request(["type": "ask", "question": pending])["type"]?.string, "ok")
        // Forgotten once in the lookup tables (within about 10 s) by the next pruning pass (one a
        // second): polled, as nothing tells a client.
        var kept: [JSON]?
        let deadline = Date().addingTimeInterval(30)
        repeat {
            kept = try c.request(["type": "questions"])["questions"]?.array?.map { $0["id"]! }
            if kept == [pending["id"]!] { break }
            usleep(100_000)
        } while Date() < deadline
        XCTAssertEqual(kept, [pending["id"]!], "every question is over a byte: the finished ones go, the pending one stays")
        XCTAssertEqual(try c.request(["type": "ask", "question": cancelled[0]])["attempt"]?.int, 1, "forgotten: asked anew")
    }

    func testRateLimitFlag() throws {
        let relay = try RelayProcess(flags: ["--ask-rate-limit", "1"])
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let c = try relay.connect()
        _ = try c.hello("c0", tokens["c0"]!)
        var codes: [String] = []
        for _ in 0..<4 { codes.append(try c.request(["type": "ask", "question": question()])["code"]?.string ?? "ok") }
        XCTAssertEqual(codes, ["ok", "ok", "rateLimited", "rateLimited"], "a burst of 2 at 1 per second")
    }

    func testADamagedStoreIsAClearErrorAndIsLeftAsItIs() throws {
        let relay = try RelayProcess()
        try FileManager.default.createDirectory(atPath: relay.data, withIntermediateDirectories: true)
        let db = relay.data + "/relay.db"
        let garbage = Data((0..<65536).map { UInt8(truncatingIfNeeded: $0 &* 7919) })
        XCTAssertTrue(FileManager.default.createFile(atPath: db, contents: garbage))
        let r = runRelay(["serve", "--socket", relay.socket, "--data", relay.data])
        XCTAssertEqual(r.status, 1)
        XCTAssertTrue(r.stderr.contains("relay.db is damaged or is not the relay's (file is not a database): restore a backup"), r.stderr)
        // `check` and `backup` say it alike: the file, and what to do.
        let check = runRelay(["check", "--data", relay.data])
        XCTAssertEqual(check.status, 1)
        XCTAssertTrue(check.stderr.contains("file is not a database"), check.stderr)
        XCTAssertTrue(check.stderr.contains("\(db): 1 problem found; restore a backup (permission-relay restore)"), check.stderr)
        let backup = runRelay(["backup", relay.dir.appendingPathComponent("b.db").path, "--data", relay.data])
        XCTAssertEqual(backup.status, 1)
        XCTAssertTrue(
            backup.stderr.contains("is damaged or is not the relay's store (file is not a database): see what is wrong"), backup.stderr)
        XCTAssertEqual(FileManager.default.contents(atPath: db), garbage, "nothing is written over it")
    }

    func testUnwritableDataDirectoryIsAClearError() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("not-a-dir-\(UUID().uuidString)")
        XCTAssertTrue(FileManager.default.createFile(atPath: file.path, contents: Data("x".utf8)))
        defer { try? FileManager.default.removeItem(at: file) }
        let r = runRelay(["serve", "--socket", "/tmp/unused-\(UUID().uuidString.prefix(6)).sock", "--data", file.path + "/data"])
        XCTAssertEqual(r.status, 1)
        XCTAssertTrue(r.stderr.contains(file.path), r.stderr)
    }
}

/// Runs the relay binary with `args` to its end: its status and what it printed.
/// Runs `statement` on the SQLite database at `path` (a stopped relay's store, or a backup).
func execSQL(_ statement: String, in path: String, file: StaticString = #filePath, line: UInt = #line) {
    var db: OpaquePointer?
    XCTAssertEqual(sqlite3_open(path, &db), SQLITE_OK, path, file: file, line: line)
    XCTAssertEqual(sqlite3_exec(db, statement, nil, nil, nil), SQLITE_OK, String(cString: sqlite3_errmsg(db)), file: file, line: line)
    sqlite3_close(db)
}

/// Runs the relay with `args` to its end; `asUser`: as that uid and gid (root only);
/// `stdout`: where its output goes instead of the result's `stdout`.
func runRelay(_ args: [String], asUser uid: uid_t? = nil, stdout: FileHandle? = nil) -> (status: Int32, stdout: String, stderr: String) {
    let p = Process()
    if let uid {
        p.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        p.arguments = ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", relayBinary] + args
    } else {
        p.executableURL = URL(fileURLWithPath: relayBinary)
        p.arguments = args
    }
    let out = Pipe(), err = Pipe()
    p.standardOutput = stdout ?? out
    p.standardError = err
    try! p.run()
    // A relay that starts serving where the test expects a refusal ends the test, not CI.
    let stray = killAfter(p, seconds: 30)
    defer { stray.cancel() }
    let o = stdout == nil ? out.fileHandleForReading.readDataToEndOfFile() : Data()
    let e = err.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return (p.terminationStatus, String(decoding: o, as: UTF8.self), String(decoding: e, as: UTF8.self))
}

extension BlockingConnection {
    /// The next frame other than `closing`, or nil once the relay closed the connection.
    func receiveSkippingClosing() throws -> JSONObject? {
        while let f = try receive() {
            if f["type"]?.string != "closing" { return f }
        }
        return nil
    }
}
