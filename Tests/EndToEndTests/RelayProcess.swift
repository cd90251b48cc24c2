// Starts the built permission-relay binary on a temporary socket and data directory,
// waits for its "listening" line (never a fixed sleep), and stops or kills it.

import CSystem
import Foundation
import RelayProtocol
import RelayServer
import Synchronization
import XCTest

/// The directory holding the programs under test: the release build when
/// `PERMISSION_PROGRAMS_DIR` names it (`scripts/test.sh` does, so that the programs are
/// tested as users run them: the optimizer has changed their behaviour before, e.g. how long
/// a signal's handler lives), else the debug build beside the test bundle.
let productsDirectory: URL = {
    if let dir = ProcessInfo.processInfo.environment["PERMISSION_PROGRAMS_DIR"], !dir.isEmpty {
        return URL(fileURLWithPath: dir)
    }
    var url = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
    while url.pathComponents.count > 1 && !FileManager.default.fileExists(atPath: url.appendingPathComponent("permission-relay").path) {
        url.deleteLastPathComponent()
    }
    return url
}()

let relayBinary = productsDirectory.appendingPathComponent("permission-relay").path

final class RelayProcess {
    let dir: URL
    let socket: String
    let data: String
    let flags: [String]
    /// The relay's open-file limit (`ulimit -n`), when a test sets one.
    let openFileLimit: Int?
    private(set) var process: Process?
    private(set) var output = ""
    /// Every relay a test holds, for the report of a stuck test.
    static let live = Mutex<[WeakRelay]>([])

    /// `socket`, `data`: where to listen and to keep the store, when not in its own directory.
    init(flags: [String] = ["--ask-rate-limit", "0"], openFileLimit: Int? = nil, socket: String? = nil, data: String? = nil) throws {
        dir = URL(fileURLWithPath: "/tmp").appendingPathComponent("pre-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        self.socket = socket ?? dir.appendingPathComponent("s").path
        self.data = data ?? dir.appendingPathComponent("data").path
        self.flags = flags
        self.openFileLimit = openFileLimit
        armWatchdog()
    }

    /// A test that still holds its relay after three minutes is stuck (a response that
    /// never comes): end the run with a message instead of blocking CI for its whole limit.
    private func armWatchdog() {
        let box = WeakRelay(self)
        Self.live.withLock { $0 = $0.filter { $0.relay != nil } + [box] }
        DispatchQueue.global().asyncAfter(deadline: .now() + 180) {
            guard let relay = box.relay else { return }
            var report = "end-to-end test stuck for 180 s (relay at \(relay.socket)); aborting the run\n"
            for other in RelayProcess.live.withLock({ $0.compactMap(\.relay) }) {
                let log = (try? String(contentsOf: other.logFile, encoding: .utf8)) ?? ""
                report += "log of the relay at \(other.socket):\n\(log.suffix(3000))\n"
            }
            FileHandle.standardError.write(Data(report.utf8))
            if let p = relay.process, p.isRunning { kill(p.processIdentifier, SIGKILL) }
            exit(1)
        }
    }

    deinit {
        if let p = process, p.isRunning { kill(p.processIdentifier, SIGKILL); p.waitUntilExit() }
        try? FileManager.default.removeItem(at: dir)
    }

    var pid: Int32 { process?.processIdentifier ?? -1 }

    /// What the relay wrote to stderr, over all its starts: shown when a test is stuck.
    var logFile: URL { dir.appendingPathComponent("relay.log") }

    /// Starts the relay and returns once it says it is listening.
    func start(file: StaticString = #filePath, line: UInt = #line) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: relayBinary)
        p.arguments = ["serve", "--socket", socket, "--data", data] + flags
        if let openFileLimit {  // the shell sets the limit and becomes the relay (same pid)
            p.executableURL = URL(fileURLWithPath: "/bin/sh")
            p.arguments = ["-c", #"ulimit -n \#(openFileLimit) && exec "$0" "$@""#, relayBinary] + p.arguments!
        }
        let out = Pipe()
        p.standardOutput = out
        if !FileManager.default.fileExists(atPath: logFile.path) { _ = FileManager.default.createFile(atPath: logFile.path, contents: nil) }
        let log = try FileHandle(forWritingTo: logFile)
        log.seekToEndOfFile()
        p.standardError = log
        try p.run()
        process = p
        var seen = Data()
        while true {
            let chunk = out.fileHandleForReading.availableData  // blocks until output or EOF
            if chunk.isEmpty {
                p.waitUntilExit()
                XCTFail("the relay exited before listening (status \(p.terminationStatus))", file: file, line: line)
                throw ServerError("relay did not start")
            }
            seen.append(chunk)
            if String(decoding: seen, as: UTF8.self).contains("listening on") { break }
        }
        output = String(decoding: seen, as: UTF8.self)
    }

    /// SIGKILL: a crash.
    func crash() {
        guard let p = process else { return }
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        process = nil
    }

    /// SIGTERM; returns the exit status.
    func terminate() -> Int32 {
        guard let p = process else { return -1 }
        kill(p.processIdentifier, SIGTERM)
        p.waitUntilExit()
        process = nil
        return p.terminationStatus
    }

    func connect() throws -> Client {
        let c = try BlockingConnection(path: socket)
        c.setTimeout(seconds: 10)
        return Client(c)
    }

    func admin() throws -> Client {
        let a = try connect()
        let w = try a.request(["type": "hello", "protocol": 1, "admin": true])
        XCTAssertEqual(w["type"]?.string, "welcome")
        return a
    }

    /// Creates `families` families named f0…, each with child cN and guardian gN; returns the tokens.
    func provision(families: Int) throws -> [String: String] {
        let a = try admin()
        var tokens: [String: String] = [:]
        for i in 0..<families {
            XCTAssertEqual(try a.request(["type": "createFamily", "family": .string("f\(i)")])["type"]?.string, "ok")
            for (m, role) in [("c\(i)", "child"), ("g\(i)", "guardian")] {
                tokens[m] = try a.request(["type": "addMember", "family": .string("f\(i)"), "member": .string(m), "role": .string(role)])[
                    "token"]?.string
            }
        }
        return tokens
    }

    /// CPU time (user and system) the relay has used, in seconds.
    func cpuSeconds() -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let end = stat.lastIndex(of: ")")
        else { return -1 }
        let fields = stat[stat.index(after: end)...].split(separator: " ")  // state is field 3
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return -1 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Open descriptors of the relay process.
    func openDescriptors() -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? -1
    }
}

final class WeakRelay: @unchecked Sendable {
    weak var relay: RelayProcess?
    init(_ r: RelayProcess) { relay = r }
}

/// A blocking client that also keeps the events it sees while waiting for replies.
final class Client {
    let c: BlockingConnection
    private var next = 1
    var events: [JSONObject] = []

    init(_ c: BlockingConnection) { self.c = c }

    func request(_ o: JSONObject) throws -> JSONObject {
        var o = o
        let id = "q\(next)"
        next += 1
        o["id"] = .string(id)
        try c.send(o)
        return try reply(id)
    }

    func send(_ o: JSONObject) throws { try c.send(o) }

    func reply(_ id: String) throws -> JSONObject {
        while let f = try c.receive() {
            if f["re"]?.string == id { return f }
            if f["type"]?.string == "ping" { try c.send(["type": "pong"]); continue }
            if f["seq"] != nil { events.append(f) }
        }
        throw ServerError("closed before the reply to \(id)")
    }

    /// The next event of `type`, from those already seen or the wire.
    func event(_ type: String) throws -> JSONObject {
        if let i = events.firstIndex(where: { $0["type"]?.string == type }) { return events.remove(at: i) }
        while let f = try c.receive() {
            if f["type"]?.string == "ping" { try c.send(["type": "pong"]); continue }
            if f["type"]?.string == type { return f }
            if f["seq"] != nil { events.append(f) }
        }
        throw ServerError("closed before a \(type) event")
    }

    func hello(_ member: String, _ token: String, session: String? = nil, resume: Int64? = nil) throws -> JSONObject {
        var h: JSONObject = ["type": "hello", "protocol": 1, "member": .string(member), "token": .string(token)]
        if let session { h["session"] = .string(session) }
        if let resume { h["resume"] = .int(resume) }
        let w = try request(h)
        guard w["type"]?.string == "welcome" else { throw ServerError("hello refused: \(JSON.object(w).text)") }
        return w
    }
}

/// Calls `body` with the address of the Unix socket at `path`, for `bind` or `connect`.
func withUnixAddress<R>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
    var addr = sockaddr_un()
    addr.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &addr.sun_path) { buf in
        for (i, b) in path.utf8.enumerated() { buf[i] = b }
    }
    return withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
}

func question(_ id: String = UUID().uuidString) -> JSON {
    .object([
        "id": .string(id),
        "topic": .object([
            "kind": "communication",
            "personInformation": [
                .object([
                    "handle": .object(["value": "+1 (555) 010-0199", "kind": "phoneNumber"]),
                    "nameComponents": .object(["givenName": "Kim", "familyName": "Lee"]),
                ])
            ],
            "actions": ["message", "audioCall"],
        ]),
    ])
}

/// Runs `process` to its end: its status, and its stdout and stderr together.
func runToEnd(_ process: Process) -> (status: Int32, output: String) {
    let out = Pipe()
    process.standardOutput = out
    process.standardError = out
    do { try process.run() } catch { return (-1, "\(error)") }
    let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    return (process.terminationStatus, text)
}

/// A process of `argv`, with exactly `environment`, in `directory` if given.
func process(_ argv: [String], environment: [String: String], directory: String? = nil) -> Process {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: argv[0])
    p.arguments = Array(argv.dropFirst())
    p.environment = environment
    if let directory { p.currentDirectoryURL = URL(fileURLWithPath: directory) }
    return p
}

/// Kills `process` if it still runs after `seconds`, so that one that never ends fails its
/// test instead of holding CI. Cancel the returned item once it has ended.
func killAfter(_ process: Process, seconds: Double) -> DispatchWorkItem {
    let pid = process.processIdentifier
    let item = DispatchWorkItem { kill(pid, SIGKILL) }
    DispatchQueue.global().asyncAfter(deadline: .now() + seconds, execute: item)
    return item
}
