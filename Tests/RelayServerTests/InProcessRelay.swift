// A relay running in this test process on a temporary socket, and a transcript-style
// client over it: `send` frames, `expect` what comes back.

import Foundation
import RelayCore
import RelayProtocol
import RelayServer
import RelayStore
import Synchronization
import XCTest

final class InProcessRelay: @unchecked Sendable {
    let dir: URL
    let socket: String
    private let server: RelayServer
    private let finished = DispatchSemaphore(value: 0)
    /// What `run` threw, if it did.
    private let failure = Mutex<String?>(nil)

    init(
        store: RelayStore? = nil, log: Log = Log(level: .error) { _ in },
        configure: (inout ServerConfig, inout CoreConfig) -> Void = { _, _ in }
    ) throws {
        dir = URL(fileURLWithPath: "/tmp").appendingPathComponent("prt-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        socket = dir.appendingPathComponent("s").path
        var sc = ServerConfig(socketPath: socket)
        sc.handleSignals = false
        var cc = CoreConfig()
        cc.relayUID = getuid()
        cc.askRateLimit = 0
        configure(&sc, &cc)
        cc.replayBudgetBytes = min(cc.replayBudgetBytes, sc.maxOutputBytes / 4)
        cc.listReplyBytes = min(cc.listReplyBytes, sc.maxOutputBytes / 4 * 3)
        let store = try store ?? SQLiteStore(path: dir.appendingPathComponent("relay.db").path)
        server = try RelayServer(config: sc, coreConfig: cc, store: store, log: log)
        let ready = DispatchSemaphore(value: 0)
        let thread = Thread { [self] in
            var serving = false
            do {
                try server.run {
                    serving = true
                    ready.signal()
                }
            } catch {
                // A failure to start fails the test now; one at the stop, when told (`stop`).
                if !serving { XCTFail("relay did not start: \(error)") }
                failure.withLock { $0 = "\(error)" }
                if !serving { ready.signal() }
            }
            finished.signal()
        }
        thread.start()
        ready.wait()
    }

    func stop() {
        if let error = stopReportingFailure() { XCTFail("relay stopped: \(error)") }
    }

    /// Stops the relay; returns what its `run` threw, if it did.
    func stopReportingFailure() -> String? {
        server.stopHandle.stop()
        finished.wait()
        try? FileManager.default.removeItem(at: dir)
        return failure.withLock { $0 }
    }

    func connect() throws -> Wire {
        let c = try BlockingConnection(path: socket)
        c.setTimeout(seconds: 5)
        return Wire(c)
    }

    /// Families `fam` (g1, c1) and `other` (og1, oc1); returns the tokens.
    func provision() throws -> [String: String] {
        let a = try connect()
        try a.send(["type": "hello", "id": "h", "protocol": 1, "admin": true])
        try a.expect(type: "welcome")
        var tokens: [String: String] = [:]
        var n = 0
        for (family, members) in [("fam", [("g1", "guardian"), ("c1", "child")]), ("other", [("og1", "guardian"), ("oc1", "child")])] {
            n += 1
            try a.send(["type": "createFamily", "id": .string("f\(n)"), "family": .string(family)])
            try a.expect(type: "ok")
            for (m, role) in members {
                try a.send(["type": "addMember", "id": .string(m), "family": .string(family), "member": .string(m), "role": .string(role)])
                tokens[m] = try a.expect(type: "ok")["token"]?.string
            }
        }
        return tokens
    }
}

/// One client connection, read as a transcript.
final class Wire {
    let c: BlockingConnection
    init(_ c: BlockingConnection) { self.c = c }

    func send(_ o: JSONObject) throws { try c.send(o) }
    func sendRaw(_ b: [UInt8]) throws { try c.sendRaw(b) }

    /// The next frame, skipping the relay's pings (answered); fails on close.
    @discardableResult
    func next(file: StaticString = #filePath, line: UInt = #line) throws -> JSONObject {
        while true {
            guard let f = try c.receive() else {
                XCTFail("the relay closed the connection", file: file, line: line)
                throw ServerError("closed")
            }
            if f["type"]?.string == "ping" {
                try c.send(["type": "pong"])
                continue
            }
            return f
        }
    }

    @discardableResult
    func expect(type: String, code: String? = nil, file: StaticString = #filePath, line: UInt = #line) throws -> JSONObject {
        let f = try next(file: file, line: line)
        XCTAssertEqual(f["type"]?.string, type, JSON.object(f).text, file: file, line: line)
        if let code { XCTAssertEqual(f["code"]?.string, code, JSON.object(f).text, file: file, line: line) }
        return f
    }

    /// Frames until the relay closes the connection.
    func untilClosed() throws -> [JSONObject] {
        var out: [JSONObject] = []
        while let f = try c.receive() { out.append(f) }
        return out
    }

    @discardableResult
    func hello(_ member: String, _ token: String, session: String? = nil, resume: Int64? = nil) throws -> JSONObject {
        var h: JSONObject = ["type": "hello", "id": "h", "protocol": 1, "member": .string(member), "token": .string(token)]
        if let session { h["session"] = .string(session) }
        if let resume { h["resume"] = .int(resume) }
        try send(h)
        return try expect(type: "welcome")
    }
}

func sampleQuestion(id: String = UUID().uuidString, avatarBytes: Int = 0) -> JSONObject {
    var person: JSONObject = [
        "handle": .object(["value": "+1 555 0100", "kind": "phoneNumber"]), "nameComponents": .object(["givenName": "Kim"]),
    ]
    if avatarBytes > 0 { person["avatarImage"] = .string(Data(repeating: 0x42, count: avatarBytes).base64EncodedString()) }
    return [
        "id": .string(id), "topic": .object(["kind": "communication", "personInformation": [.object(person)], "actions": ["message"]]),
    ]
}

/// A wall clock a test can set forward or back.
final class SettableClock: Sendable {
    private let offset = Mutex<Int64>(0)

    func now() -> Timestamp { Timestamp(milliseconds: Timestamp.now().milliseconds + offset.withLock { $0 }) }

    func move(seconds: Int64) { offset.withLock { $0 += seconds * 1000 } }
}

/// The lines a relay logs, for a test to wait on.
final class LoggedLines: @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [String] = []
    private let arrived = DispatchSemaphore(value: 0)

    lazy var log = Log(level: .debug) { [unowned self] line in
        lock.withLock { lines.append(line) }
        arrived.signal()
    }

    /// The first line logged that contains `text`, waiting up to `seconds` for it.
    func first(containing text: String, within seconds: Double = 10) -> String? {
        let deadline = DispatchTime.now() + seconds
        while true {
            if let line = lock.withLock({ lines.first { $0.contains(text) } }) { return line }
            guard arrived.wait(timeout: deadline) == .success else { return nil }
        }
    }
}
