// Raw-wire transcripts against an in-process relay on a temporary socket.

import Foundation
import RelayProtocol
import RelayServer
import RelayStore
import Synchronization
import XCTest

final class WireTests: XCTestCase {
    func testOneFullCycle() throws {
        try fullCycle(on: try InProcessRelay())
    }

    /// The same with a loop that always sleeps between turns (the other tests poll first
    /// while requests come close together, the default).
    func testOneFullCycleWithoutPolling() throws {
        try fullCycle(on: try InProcessRelay { server, _ in server.spinMicroseconds = 0 })
    }

    private func fullCycle(on relay: InProcessRelay) throws {
        defer { relay.stop() }
        let tokens = try relay.provision()
        let child = try relay.connect()
        try child.hello("c1", tokens["c1"]!, session: "app")
        try child.send(["type": "subscribe", "id": "s", "topics": ["communication"]])
        try child.expect(type: "ok")
        let guardian = try relay.connect()
        try guardian.hello("g1", tokens["g1"]!)
        let q = sampleQuestion()
        try child.send(["type": "ask", "id": "a", "question": .object(q)])
        XCTAssertEqual(try child.expect(type: "ok")["status"]?.string, "pending")
        let question = try guardian.expect(type: "question")
        XCTAssertEqual(question["question"]?["id"], q["id"])
        try guardian.send(["type": "answer", "id": "x", "questionId": q["id"]!, "choice": "approve"])
        XCTAssertEqual(try guardian.expect(type: "ok")["status"]?.string, "answered")
        XCTAssertEqual(try guardian.expect(type: "questionClosed")["by"]?.string, "g1")
        let response = try child.expect(type: "response")
        XCTAssertEqual(response["choice"]?["id"]?.string, "approve")
        try child.expect(type: "knownHandlesChanged")
        try child.send(["type": "ack", "seq": response["seq"]!])
        try child.send(["type": "ping"])
        try child.expect(type: "pong")
    }

    func testFramingAbuse() throws {
        let relay = try InProcessRelay { _, core in core.maxFrameBytes = 4096 }
        defer { relay.stop() }
        let tokens = try relay.provision()
        let c = try relay.connect()
        try c.hello("c1", tokens["c1"]!)
        for (body, code) in [
            ("nope", "badFrame"), ("[]", "badFrame"), (#"{"id":"1"}"#, "badFrame"), (#"{"type":"zap","id":"z"}"#, "unknownType"),
        ] {
            try c.sendRaw(framed(Array(body.utf8)))
            try c.expect(type: "error", code: code)
        }
        // A request split across writes inside its header and body.
        let f = (["type": "limits", "id": "split"] as JSONObject).frame
        try c.sendRaw(Array(f[0..<2]))
        try c.sendRaw(Array(f[2..<9]))
        try c.sendRaw(Array(f[9...]))
        XCTAssertEqual(try c.expect(type: "ok")["re"]?.string, "split")
        // A header announcing too much: error, then close, without the body.
        try c.sendRaw([0, 0, 0x10, 0x01])
        let last = try c.untilClosed()
        XCTAssertEqual(last.first?["code"]?.string, "frameTooLarge")

        let z = try relay.connect()
        try z.hello("c1", tokens["c1"]!)
        try z.sendRaw([0, 0, 0, 0])
        XCTAssertEqual(try z.untilClosed().first?["code"]?.string, "badFrame")
    }

    func testHandshakeTimeoutClosesASilentConnection() throws {
        let relay = try InProcessRelay { server, _ in server.handshakeTimeoutSeconds = 0.3 }
        defer { relay.stop() }
        let c = try relay.connect()
        try c.sendRaw([0, 0, 0, 40, UInt8(ascii: "{")])  // part of a hello, never finished
        let frames = try c.untilClosed()
        XCTAssertEqual(frames.last?["reason"]?.string, "handshakeTimeout")
    }

    func testHeartbeatPingsThenClosesASilentSession() throws {
        let relay = try InProcessRelay { _, core in core.heartbeatSeconds = 1 }
        defer { relay.stop() }
        let tokens = try relay.provision()
        let c = try relay.connect()
        try c.hello("g1", tokens["g1"]!)
        let frames = try c.untilClosed()  // never answers: pinged, then closed
        XCTAssertEqual(frames.first?["type"]?.string, "ping")
        XCTAssertEqual(frames.last?["reason"]?.string, "heartbeatTimeout")
    }

    /// A client that only answers the relay's pings (and never pings itself) stays
    /// connected: each ping is written when it is due, not held until the connection ends.
    func testASessionThatOnlyAnswersPingsStaysOpen() throws {
        let relay = try InProcessRelay { _, core in core.heartbeatSeconds = 1 }
        defer { relay.stop() }
        let tokens = try relay.provision()
        let c = try relay.connect()
        try c.hello("g1", tokens["g1"]!)
        c.c.setTimeout(seconds: 2.5)  // a ping is due every second of silence
        for _ in 0..<5 {  // five intervals: past the three after which a silent session is closed
            let f = try XCTUnwrap(try c.c.receive(), "the relay closed a session that answered every ping")
            XCTAssertEqual(f["type"]?.string, "ping")
            try c.send(["type": "pong"])
        }
    }

    /// Connections of one member that never read are bounded together, not each on its
    /// own: past the member's limit, those that cannot take more are dropped, though each
    /// holds far less than a connection may.
    func testAMembersConnectionsThatNeverReadAreBoundedTogether() throws {
        let relay = try InProcessRelay { server, _ in
            server.maxOutputBytes = 8 << 20
            server.maxMemberOutputBytes = 1 << 20
        }
        defer { relay.stop() }
        let tokens = try relay.provision()
        var idle: [Wire] = []
        for _ in 0..<4 {
            let g = try relay.connect()
            try g.hello("g1", tokens["g1"]!)
            idle.append(g)  // never read from again
        }
        let c = try relay.connect()
        try c.hello("c1", tokens["c1"]!)
        for i in 0..<24 {  // about 3.6 MB of question events for each guardian connection
            try c.send(["type": "ask", "id": .string("a\(i)"), "question": .object(sampleQuestion(avatarBytes: 150_000))])
            try c.expect(type: "ok")
        }
        var dropped = 0
        for g in idle {
            g.c.setTimeout(seconds: 1)
            do {
                while try g.c.receive() != nil {}
                dropped += 1  // the relay closed it
            } catch {
                // still open: it timed out reading what is left
            }
        }
        XCTAssertGreaterThan(dropped, 0, "no connection was dropped, though the member's connections held over the limit")
    }

    func testAWallClockSetForwardExpiresWhatIsDueAndKeepsTheConnections() throws {
        let clock = SettableClock()
        let relay = try InProcessRelay { server, _ in server.wallClock = { clock.now() } }
        defer { relay.stop() }
        let tokens = try relay.provision()
        let child = try relay.connect()
        try child.hello("c1", tokens["c1"]!)
        try child.send(["type": "subscribe", "id": "s", "topics": ["communication"]])
        try child.expect(type: "ok")
        let guardian = try relay.connect()
        try guardian.hello("g1", tokens["g1"]!)
        var q = sampleQuestion()
        q["expirationDate"] = .string(Timestamp(milliseconds: clock.now().milliseconds + 600_000).rfc3339)
        try child.send(["type": "ask", "id": "a", "question": .object(q)])
        try child.expect(type: "ok")
        try guardian.expect(type: "question")
        clock.move(seconds: 3600)  // far past three heartbeat intervals of silence, on the wall
        XCTAssertEqual(try child.expect(type: "questionClosed")["reason"]?.string, "expired")
        XCTAssertEqual(try guardian.expect(type: "questionClosed")["reason"]?.string, "expired")
        for c in [child, guardian] {
            try c.send(["type": "ping"])
            try c.expect(type: "pong")
        }
    }

    func testAWallClockSetBackStillPingsAndClosesASilentSession() throws {
        let clock = SettableClock()
        let relay = try InProcessRelay { server, core in
            server.wallClock = { clock.now() }
            core.heartbeatSeconds = 1
        }
        defer { relay.stop() }
        let tokens = try relay.provision()
        let c = try relay.connect()
        try c.hello("g1", tokens["g1"]!)
        clock.move(seconds: -3600)
        let frames = try c.untilClosed()  // never answers: pinged, then closed
        XCTAssertEqual(frames.first?["type"]?.string, "ping")
        XCTAssertEqual(frames.last?["reason"]?.string, "heartbeatTimeout")
    }

    func testALowDiskIsLoggedAtStartAndWhileItLastsAndSoIsItsRecovery() throws {
        let space = Mutex(DiskSpace(available: 30 << 20, total: 1 << 30))  // 30 MiB of 1 GiB: low
        let logged = LoggedLines()
        let relay = try InProcessRelay(log: logged.log) { server, _ in
            server.dataDirectory = "/data"
            server.diskSpace = { path in path == "/data" ? space.withLock { $0 } : nil }
            server.pruneIntervalSeconds = 0.05
        }
        defer { relay.stop() }
        let warning = logged.first(containing: "the data directory's file system has 30 MiB free of 1024 MiB")
        XCTAssertNotNil(warning, "said at start")
        XCTAssertTrue(warning?.contains("warning") ?? false, warning ?? "")
        space.withLock { $0.available = 600 << 20 }
        XCTAssertNotNil(logged.first(containing: "has room again (600 MiB free)"))
    }

    /// Under a mebibyte free, the warning says how much in kibibytes, not "0 MiB".
    func testALowDiskUnderAMebibyteSaysHowMuchIsLeft() throws {
        let logged = LoggedLines()
        let relay = try InProcessRelay(log: logged.log) { server, _ in
            server.dataDirectory = "/data"
            server.diskSpace = { _ in DiskSpace(available: 200 << 10, total: 3 << 20) }
        }
        defer { relay.stop() }
        XCTAssertNotNil(logged.first(containing: "the data directory's file system has 200 KiB free of 3 MiB"))
    }

    func testAFrameThatNeverEndsIsRefusedThoughItsBytesKeepComing() throws {
        let relay = try InProcessRelay { _, core in core.heartbeatSeconds = 1 }
        defer { relay.stop() }
        let tokens = try relay.provision()
        let c = try relay.connect()
        try c.hello("g1", tokens["g1"]!)
        try c.sendRaw([0, 1, 0, 0] + Array(#"{"type":"pending","id":"p","pad":""#.utf8))  // 65,536 bytes announced
        // A byte every 200 ms: never silent for a heartbeat, never a whole frame.
        let started = Date()
        var closed = false
        while !closed && Date().timeIntervalSince(started) < 8 {
            Thread.sleep(forTimeInterval: 0.2)
            closed = (try? c.sendRaw([UInt8(ascii: "x")])) == nil
        }
        let frames = try c.untilClosed()
        let refusal = frames.first { $0["type"]?.string == "error" }
        XCTAssertEqual(refusal?["code"]?.string, "badFrame", "\(frames)")
        XCTAssertLessThan(Date().timeIntervalSince(started), 6, "three heartbeat intervals (3 s), not never")
    }

    func testAFrameLeftIncompleteBySilenceIsRefusedAsIncomplete() throws {
        let relay = try InProcessRelay { _, core in core.heartbeatSeconds = 1 }
        defer { relay.stop() }
        let tokens = try relay.provision()
        let c = try relay.connect()
        try c.hello("g1", tokens["g1"]!)
        try c.sendRaw([0, 0, 0, 40] + Array(#"{"type":"pending""#.utf8))  // and nothing more
        let frames = try c.untilClosed()
        let refusal = frames.first { $0["type"]?.string == "error" }
        XCTAssertEqual(refusal?["code"]?.string, "badFrame", "\(frames)")
        XCTAssertTrue(refusal?["message"]?.string?.contains("stayed incomplete") ?? false, "\(frames)")
    }

    func testFramesThatKeepComingSplitAcrossWritesAreNotAFrameThatNeverEnds() throws {
        let relay = try InProcessRelay { _, core in core.heartbeatSeconds = 1 }
        defer { relay.stop() }
        let tokens = try relay.provision()
        let c = try relay.connect()
        try c.hello("g1", tokens["g1"]!)
        // Each write ends halfway through a frame, for longer than three heartbeat intervals:
        // the part the relay holds is always a new frame's.
        let frame = (["type": "pending", "id": "p"] as JSONObject).frame
        let (head, tail) = (Array(frame[..<(frame.count / 2)]), Array(frame[(frame.count / 2)...]))
        try c.sendRaw(head)
        let started = Date()
        while Date().timeIntervalSince(started) < 4.5 {
            try c.sendRaw(tail + head)
            try c.expect(type: "ok")  // the frame the write completed
            Thread.sleep(forTimeInterval: 0.1)
        }
        try c.sendRaw(tail)
        try c.expect(type: "ok")
    }

    func testConnectionLimitAnswersBusy() throws {
        let relay = try InProcessRelay { server, _ in server.maxConnections = 2 }
        defer { relay.stop() }
        let a = try relay.connect()
        let b = try relay.connect()
        let c = try relay.connect()
        XCTAssertEqual(try c.untilClosed().first?["code"]?.string, "busy")
        _ = (a, b)
    }

    /// A refused client that sends its hello only once the `busy` and the end of the
    /// relay's writing are there to read (as one that sends at once may find) has it
    /// taken, then reads them.
    func testARefusedClientsHelloIsTakenAndItReadsBusy() throws {
        let relay = try InProcessRelay { server, _ in server.maxConnections = 1 }
        defer { relay.stop() }
        let held = try relay.connect()
        for _ in 0..<5 {
            let c = try BlockingConnection(path: relay.socket)
            c.setTimeout(seconds: 10)
            let endOfWriting = Int16(0x2000)  // POLLRDHUP
            var ready = pollfd(fd: c.fd, events: endOfWriting, revents: 0)
            XCTAssertEqual(poll(&ready, 1, 10_000), 1, "the relay has written all it will")
            try c.send(["type": "hello", "id": "h", "protocol": 1, "admin": true])
            XCTAssertEqual(try c.receive()?["code"]?.string, "busy")
            XCTAssertNil(try c.receive(), "then the end")
        }
        _ = held
    }

    func testSlowConsumerIsDroppedAndResumesLater() throws {
        let relay = try InProcessRelay { server, _ in server.maxOutputBytes = 65536 }
        defer { relay.stop() }
        let tokens = try relay.provision()
        let gw = try connectReadingLittle(to: relay)
        let g = gw.c
        try gw.send(["type": "hello", "id": "h", "protocol": 1, "member": "g1", "token": .string(tokens["g1"]!), "session": "phone"])
        try gw.expect(type: "welcome")
        let c = try relay.connect()
        try c.hello("c1", tokens["c1"]!)
        var ids: [String] = []
        for i in 0..<60 {
            let q = sampleQuestion(avatarBytes: 20_000)
            ids.append(q["id"]!.string!)
            try c.send(["type": "ask", "id": .string("a\(i)"), "question": .object(q)])
            try c.expect(type: "ok")
        }
        // The guardian never read: its connection was dropped. Its durable session still has everything.
        let g2 = try relay.connect()
        let w = try g2.hello("g1", tokens["g1"]!, session: "phone")
        XCTAssertEqual(w["cursor"]?.int, 0)
        var seen: [String] = []
        while seen.count < ids.count { seen.append(try g2.expect(type: "question")["question"]!["id"]!.string!) }
        XCTAssertEqual(seen, ids)
        let stale = try g.receiveAll()
        XCTAssertLessThan(stale, 60 * 20_000, "the slow connection was cut before receiving everything")
    }

    /// Requests pipelined behind one another whose replies are large (lists) are answered
    /// one after another as the client reads, never all at once past its output limit:
    /// the client is not dropped, and what the relay holds for it stays bounded.
    func testPipelinedListRequestsAreAnsweredAsTheClientReads() throws {
        let relay = try InProcessRelay { server, _ in server.maxOutputBytes = 1 << 20 }  // list replies of 768 KiB
        defer { relay.stop() }
        let tokens = try relay.provision()
        try askWithAvatars(12, on: relay, tokens)
        let g = try relay.connect()
        try g.hello("g1", tokens["g1"]!)
        try g.sendRaw((0..<50).flatMap { i in (["type": "pending", "id": .string("p\(i)")] as JSONObject).frame })
        for i in 0..<50 {
            let reply = try g.expect(type: "ok")
            XCTAssertEqual(reply["re"]?.string, "p\(i)")
            XCTAssertGreaterThan(reply["questions"]?.array?.count ?? 0, 0)
        }
        try g.send(["type": "ping"])
        try g.expect(type: "pong")
    }

    /// A client that writes all its requests before it reads a reply is served as far as
    /// a connection's limits allow: the relay takes its requests while their replies fit,
    /// then holds what comes until the client reads (it does not stop reading at once, which
    /// left such a client blocked in its write, and dropped as silent).
    func testAClientThatWritesEverythingBeforeReadingGetsEveryReply() throws {
        let relay = try InProcessRelay()
        defer { relay.stop() }
        let tokens = try relay.provision()
        let c = try relay.connect()
        try c.hello("c1", tokens["c1"]!)
        let pings = 150_000  // about 2.8 MB each way
        let frames = (0..<pings).flatMap { _ in (["type": "ping"] as JSONObject).frame }
        let written = writeInBackground(frames, to: c.c.fd)
        XCTAssertEqual(written.wait(timeout: .now() + 20), .success, "the client is still blocked writing its requests")
        for _ in 0..<pings { try c.expect(type: "pong") }
    }

    /// Connections that announce large frames before `hello` and never finish them are held
    /// to a budget together: past it, they are read no further (their handshakes time out),
    /// rather than each made to hold a frame's worth; a client saying hello is served. Once
    /// the budget has room again, those held back are read again.
    func testUnfinishedFramesBeforeHelloAreReadOnlyWithinABudget() throws {
        let relay = try InProcessRelay { server, _ in
            server.maxHandshakeInputBytes = 1 << 20
            server.handshakeTimeoutSeconds = 60
        }
        defer { relay.stop() }
        let announced = 1_000_000
        let bytes =
            [UInt8(announced >> 24), UInt8(announced >> 16 & 0xFF), UInt8(announced >> 8 & 0xFF), UInt8(announced & 0xFF)]
            + [UInt8](repeating: UInt8(ascii: " "), count: 900_000)
        _ = try unfinishedFramesAreHeldToABudget(on: relay, tokens: try relay.provision(), sending: bytes, after: nil)
    }

    /// The same after `hello`: a member's connections that announce large frames and never
    /// finish them are read only within a budget together, others are served meanwhile, and
    /// one held back is read again, its frame taken, once the budget has room.
    func testUnfinishedFramesAfterHelloAreReadOnlyWithinABudget() throws {
        let relay = try InProcessRelay { server, core in
            server.maxInputBytes = 1 << 20
            core.heartbeatSeconds = 60
        }
        defer { relay.stop() }
        let pad = String(repeating: "x", count: 900_000)
        let frame = (["type": "pending", "id": "p", "pad": .string(pad)] as JSONObject).frame
        guard
            let held = try unfinishedFramesAreHeldToABudget(
                on: relay, tokens: try relay.provision(), sending: Array(frame.dropLast(10)), after: "g1")
        else { return }
        try held.sendRaw(Array(frame.suffix(10)))
        XCTAssertEqual(try held.expect(type: "ok")["re"]?.string, "p")
    }

    /// Four connections (saying hello as `member` first, if given) each write `bytes` of a
    /// frame they never finish, against a budget of 1 MiB: fewer than three are read whole,
    /// a client saying hello is served meanwhile, and once the others go away one held back
    /// is read again. Returns that one (nil when none was held).
    private func unfinishedFramesAreHeldToABudget(
        on relay: InProcessRelay, tokens: [String: String], sending bytes: [UInt8], after member: String?
    ) throws -> Wire? {
        var unfinished: [(Wire, DispatchSemaphore)] = []
        for _ in 0..<4 {
            let w = try relay.connect()
            if let member { try w.hello(member, tokens[member]!) }
            // A small send buffer: a write waits for the relay to read, whatever the host's default.
            var size: Int32 = 64 << 10
            setsockopt(w.c.fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            unfinished.append((w, writeInBackground(bytes, to: w.c.fd)))
        }
        // Those read whole within two seconds (none, when all four reached the budget together).
        var read = Set<Int>()
        let deadline = DispatchTime.now() + 2
        repeat {
            for (i, (_, written)) in unfinished.enumerated() where !read.contains(i) {
                if written.wait(timeout: .now() + 0.05) == .success { read.insert(i) }
            }
        } while DispatchTime.now() < deadline
        XCTAssertLessThan(read.count, 3, "the relay read \(read.count) unfinished frames of 900 KB past a budget of 1 MiB")
        let c = try relay.connect()
        try c.hello("c1", tokens["c1"]!)
        try c.send(["type": "ping"])
        try c.expect(type: "pong")
        // Once the others go away, one held back is read again.
        guard let held = unfinished.indices.first(where: { !read.contains($0) }) else { return nil }
        for i in unfinished.indices where i != held { shutdown(unfinished[i].0.c.fd, Int32(SHUT_RDWR)) }
        XCTAssertEqual(
            unfinished[held].1.wait(timeout: .now() + 20), .success,
            "a connection held back by the budget was not read again once it had room")
        return unfinished[held].0
    }

    /// Another user's connections that have not said hello are bounded, to a quarter of the
    /// connections the relay takes: on a socket every user reaches, one user cannot keep
    /// the others out by opening connections and saying nothing. The relay's own user (and
    /// root) is not bound so.
    func testAnotherUsersConnectionsWithoutHelloAreBounded() throws {
        let (python, setpriv) = ("/usr/bin/python3", "/usr/bin/setpriv")
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: python), FileManager.default.isExecutableFile(atPath: setpriv)
        else { throw XCTSkip("connecting as other users needs root, \(setpriv) and \(python)") }
        let relay = try InProcessRelay { server, core in
            server.maxConnections = 8
            server.socketMode = 0o666
            server.handshakeTimeoutSeconds = 30
            core.relayUID = 65534  // as if the relay ran as nobody
        }
        defer { relay.stop() }
        // Four connections, one after another, each given a second to be refused; then the
        // held ones say a hello that fails (the relay closes them), and two more connect.
        let script = """
            import socket, struct, sys
            def attempt(n):
                busy, held = 0, []
                for _ in range(n):
                    s = socket.socket(socket.AF_UNIX)
                    s.connect(sys.argv[1])
                    s.settimeout(1)
                    try:
                        busy += b"busy" in s.recv(4096)
                    except socket.timeout:
                        held.append(s)
                return busy, held
            busy, held = attempt(4)
            for s in held:
                hello = b'{"type":"hello","id":"h","protocol":1,"member":"nobody","token":"wrong"}'
                s.sendall(struct.pack(">I", len(hello)) + hello)
                s.settimeout(5)
                while s.recv(4096):
                    pass
            again, still = attempt(2)
            print(busy, len(held), again, len(still))
            """
        func run(as uid: Int) throws -> String {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: setpriv)
            p.arguments = ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", python, "-c", script, relay.socket]
            let out = Pipe()
            p.standardOutput = out
            try p.run()
            let said = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            p.waitUntilExit()
            return said.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        XCTAssertEqual(try run(as: 65533), "2 2 0 2", "another user's: two refused and two held, then the closed ones let go")
        XCTAssertEqual(try run(as: 65534), "0 4 0 2", "the relay's own user's: none refused")
        let tokens = try relay.provision()  // and root's, as admin
        let c = try relay.connect()
        try c.hello("c1", tokens["c1"]!)
    }

    /// Only a connection's own replies hold its requests back: a guardian far behind on the
    /// questions sent to it still has its answers taken at once.
    func testAGuardianBehindOnEventsStillHasItsAnswersTaken() throws {
        let relay = try InProcessRelay()
        defer { relay.stop() }
        let tokens = try relay.provision()
        let gw = try connectReadingLittle(to: relay)
        try gw.hello("g1", tokens["g1"]!)
        let c = try relay.connect()
        try c.hello("c1", tokens["c1"]!)
        try c.send(["type": "subscribe", "id": "s", "topics": ["communication"]])
        try c.expect(type: "ok")
        var first = ""
        for i in 0..<30 {  // about 4 MB of question events the guardian does not read
            let q = sampleQuestion(avatarBytes: 100_000)
            if i == 0 { first = q["id"]!.string! }
            try c.send(["type": "ask", "id": .string("a\(i)"), "question": .object(q)])
            try c.expect(type: "ok")
        }
        try gw.send(["type": "answer", "id": "yes", "questionId": .string(first), "choice": "approve"])
        c.c.setTimeout(seconds: 5)
        XCTAssertEqual(try c.expect(type: "response")["question"]?["id"]?.string, first)
    }

    /// A client whose requests wait (it is owed much) cannot be heard meanwhile: its pings
    /// wait behind them. While it reads, it is not taken for silent.
    func testAClientThatReadsSlowlyWhileItsRequestsWaitIsNotTakenForSilent() throws {
        let relay = try InProcessRelay { server, core in
            server.maxOutputBytes = 1 << 20  // list replies of 768 KiB; requests wait at 64 KiB owed
            core.heartbeatSeconds = 1
            core.maxFrameBytes = 256 << 10  // read up to this much while they wait
        }
        defer { relay.stop() }
        let tokens = try relay.provision()
        try askWithAvatars(8, on: relay, tokens)
        let g = try relay.connect()
        try g.hello("g1", tokens["g1"]!)
        let pad = String(repeating: "x", count: 200_000)
        let requests = (0..<2).flatMap { i in (["type": "pending", "id": .string("p\(i)"), "pad": .string(pad)] as JSONObject).frame }
        let fd = g.c.fd
        _ = writeInBackground(requests, to: fd)
        // About 200 KB a second: each reply takes four seconds, more than three heartbeats.
        var decoder = FrameDecoder(maxFrameBytes: 64 << 20)
        var replies: [String] = []
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        let deadline = Date().addingTimeInterval(30)
        while replies.count < 2 && Date() < deadline {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { break }
            decoder.append(chunk[0..<n])
            while case .frame(let body)? = decoder.next() {
                let f = try JSON.parse(body)
                XCTAssertNotEqual(f["type"]?.string, "closing", JSON.object(f.object ?? [:]).text)
                if f["type"]?.string == "ok" { replies.append(f["re"]?.string ?? "") }
            }
            usleep(80_000)
        }
        XCTAssertEqual(replies, ["p0", "p1"])
    }

    /// What admins change, and limits a guardian turns, are logged once committed: who did what.
    func testAdminChangesAreLogged() throws {
        let logged = LoggedLines()
        let relay = try InProcessRelay(log: logged.log)
        defer { relay.stop() }
        let tokens = try relay.provision()
        XCTAssertNotNil(logged.first(containing: "info: admin (uid \(getuid())) created family fam"))
        XCTAssertNotNil(logged.first(containing: "admin (uid \(getuid())) added child c1 to family fam"))
        let g = try relay.connect()
        try g.hello("g1", tokens["g1"]!)
        try g.send(["type": "setLimits", "id": "l", "child": "c1", "enabled": false])
        try g.expect(type: "ok")
        XCTAssertNotNil(logged.first(containing: "guardian g1 turned c1's communication limits off"))
        // Connections, at the debug level: opened, and closed with why.
        XCTAssertNotNil(logged.first(containing: "debug: connection 1 opened (uid \(getuid()))"))
        _ = Glibc.shutdown(g.c.fd, Int32(SHUT_RDWR))
        XCTAssertNotNil(logged.first(containing: "closed (by the client)"))
    }

    /// A relay whose socket file is removed can no longer be reached: it says so, once.
    func testARemovedSocketFileIsLogged() throws {
        let logged = LoggedLines()
        let relay = try InProcessRelay(log: logged.log)
        defer { relay.stop() }
        XCTAssertEqual(unlink(relay.socket), 0)
        let line = logged.first(containing: "was removed or replaced")
        XCTAssertTrue(line?.contains("the socket \(relay.socket) was removed or replaced: no new client can reach this relay") == true)
    }

    /// A connection whose socket takes in little (4 KiB): what it does not read stays with the relay.
    private func connectReadingLittle(to relay: InProcessRelay) throws -> Wire {
        let c = try BlockingConnection(path: relay.socket)
        var small: Int32 = 4096
        setsockopt(c.fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        return Wire(c)
    }

    /// c1 asks `count` questions with avatars of 100 KB each (about 135 KB a question).
    private func askWithAvatars(_ count: Int, on relay: InProcessRelay, _ tokens: [String: String]) throws {
        let c = try relay.connect()
        try c.hello("c1", tokens["c1"]!)
        for i in 0..<count {
            try c.send(["type": "ask", "id": .string("a\(i)"), "question": .object(sampleQuestion(avatarBytes: 100_000))])
            try c.expect(type: "ok")
        }
    }

    /// Writes `bytes` to `fd` on a thread of its own, blocking as the socket does; the
    /// semaphore is signalled once all are written (never, if the relay closes first).
    private func writeInBackground(_ bytes: [UInt8], to fd: Int32) -> DispatchSemaphore {
        let written = DispatchSemaphore(value: 0)
        Thread {
            var sent = 0
            while sent < bytes.count {
                let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
                guard n > 0 else { return }
                sent += n
            }
            written.signal()
        }.start()
        return written
    }

    /// A store made, then opened capped at 40 pages (a disk that fills at once), in a
    /// directory removed after the test.
    private func fullDiskStore() throws -> SQLiteStore {
        let dir = URL(fileURLWithPath: "/tmp").appendingPathComponent("prt-full-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("relay.db").path
        _ = try SQLiteStore(path: path)
        return try SQLiteStore(path: path, maxPageCount: 40)
    }

    func testFullDiskLosesNothingAcknowledged() throws {
        let relay = try InProcessRelay(store: try fullDiskStore())
        defer { relay.stop() }
        let tokens = try relay.provision()
        let c = try relay.connect()
        try c.hello("c1", tokens["c1"]!)
        let kept = sampleQuestion()
        try c.send(["type": "ask", "id": "ok", "question": .object(kept)])
        try c.expect(type: "ok")
        let before = try status(relay)
        // A question too large for the capped database: no reply; the connection is told
        // why, and closed.
        try c.send(["type": "ask", "id": "big", "question": .object(sampleQuestion(avatarBytes: 200_000))])
        let frames = try c.untilClosed()
        XCTAssertFalse(frames.contains { $0["re"]?.string == "big" }, "nothing unstored is acknowledged: \(frames)")
        let notice = try XCTUnwrap(frames.last)
        XCTAssertEqual(notice["code"]?.string, "busy", "\(frames)")
        XCTAssertTrue(notice["message"]?.string?.contains("out of disk space") == true, "\(notice)")
        // Meanwhile a new connection is refused, saying why, rather than taken only to fail again.
        try expectRefusal(relay, for: 1)
        // After the pause it states the relay serves again, and what was acknowledged is there.
        Thread.sleep(forTimeInterval: 1)
        let g = try relay.connect()
        try g.hello("g1", tokens["g1"]!)
        try g.send(["type": "pending", "id": "p"])
        let pending = try g.expect(type: "ok")["questions"]!.array!
        XCTAssertEqual(pending.map { $0["id"] }, [kept["id"]])
        // The relay rebuilt its state from the store; what `status` counts goes on.
        let after = try status(relay)
        XCTAssertGreaterThan(after["framesIn"]?.int ?? 0, before["framesIn"]?.int ?? 0, "\(before) \(after)")
        // A second failure in a row doubles the pause; a commit that succeeds ends the series.
        let big: JSONObject = ["type": "ask", "id": "big", "question": .object(sampleQuestion(avatarBytes: 200_000))]
        let c2 = try relay.connect()
        try c2.hello("c1", tokens["c1"]!)
        try c2.send(big)
        _ = try c2.untilClosed()
        try expectRefusal(relay, for: 2)
        Thread.sleep(forTimeInterval: 2)
        let c3 = try relay.connect()
        try c3.hello("c1", tokens["c1"]!)
        try c3.send(["type": "ask", "id": "small", "question": .object(sampleQuestion())])
        try c3.expect(type: "ok")
        try c3.send(big)
        _ = try c3.untilClosed()
        try expectRefusal(relay, for: 1)
    }

    /// Space freed on a full disk ends the refusal of new connections at once, not at the
    /// end of its pause.
    func testSpaceFreedOnAFullDiskEndsTheRefusalAtOnce() throws {
        let space = Mutex(DiskSpace(available: 1 << 30, total: 8 << 30))
        let logged = LoggedLines()
        let relay = try InProcessRelay(store: try fullDiskStore(), log: logged.log) { server, _ in
            server.dataDirectory = "/data"
            server.diskSpace = { path in path == "/data" ? space.withLock { $0 } : nil }
        }
        defer { relay.stop() }
        let tokens = try relay.provision()
        let c = try relay.connect()
        try c.hello("c1", tokens["c1"]!)
        try c.send(["type": "ask", "id": "big", "question": .object(sampleQuestion(avatarBytes: 200_000))])
        _ = try c.untilClosed()
        try expectRefusal(relay, for: 1)
        space.withLock { $0.available += 4 << 20 }
        let again = try relay.connect()
        try again.hello("c1", tokens["c1"]!)
        XCTAssertNotNil(logged.first(containing: "free again: taking connections"))
    }

    /// The relay's `status` reply, asked over an admin session of its own.
    private func status(_ relay: InProcessRelay) throws -> JSONObject {
        let a = try relay.connect()
        try a.send(["type": "hello", "id": "h", "protocol": 1, "admin": true])
        try a.expect(type: "welcome")
        try a.send(["type": "status", "id": "s"])
        return try a.expect(type: "ok")
    }

    /// Expects a new connection to be refused for about `seconds` more, for a full disk.
    private func expectRefusal(_ relay: InProcessRelay, for seconds: Int, line: UInt = #line) throws {
        let refusal = try relay.connect().expect(type: "error", code: "busy", line: line)
        let message = try XCTUnwrap(refusal["message"]?.string)
        XCTAssertTrue(message.contains("unable to store changes (out of disk space) for another \(seconds) s"), message, line: line)
    }
}

extension BlockingConnection {
    /// Reads until the relay closes the connection; returns the number of bytes of frames read.
    func receiveAll() throws -> Int {
        var total = 0
        while let f = try receive() { total += f.encoded.count }
        return total
    }
}
