// A real nats-server with JetStream on a loopback port and a store of its own, for the
// hub tests: started, killed with SIGKILL, and started again on the same port and store.

import Foundation
import RelayHub
import XCTest

final class NATSServer {
    let port: Int
    let storeDirectory: URL
    private var process: Process?

    var url: String { "nats://127.0.0.1:\(port)" }

    /// Starts a server; skips the test when nats-server is not installed. `configuration`
    /// makes the server's configuration file from its port and store directory (a hub in
    /// operator mode); without it, the server is open to any client.
    init(configuration: ((_ port: Int, _ store: URL) throws -> String)? = nil) throws {
        guard let executable = Self.executable() else {
            throw XCTSkip("nats-server is not installed (apt-get install nats-server; .ci/run installs it)")
        }
        self.executable = executable
        port = try Self.freePort()
        storeDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("nats-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: storeDirectory, withIntermediateDirectories: true)
        arguments =
            try configuration.map { ["-c", try $0(port, storeDirectory)] }
            ?? ["-js", "-a", "127.0.0.1", "-p", "\(port)", "-sd", storeDirectory.path]
        try start()
    }

    private let executable: String
    private var arguments: [String] = []

    deinit {
        kill()
        try? FileManager.default.removeItem(at: storeDirectory)
    }

    /// Starts the server and returns once it says it is ready.
    func start() throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: executable)
        p.arguments = arguments
        let log = Pipe()
        p.standardError = log
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        process = p
        // nats-server logs to stderr; "Server is ready" comes once it listens.
        var seen = Data()
        let handle = log.fileHandleForReading
        while !String(decoding: seen, as: UTF8.self).contains("Server is ready") {
            let chunk = handle.availableData
            guard !chunk.isEmpty else {
                throw NSError(
                    domain: "NATSServer", code: 1,
                    userInfo: [NSLocalizedDescriptionKey: "nats-server ended: \(String(decoding: seen, as: UTF8.self))"])
            }
            seen.append(chunk)
        }
        // Keep draining its log, so that it never blocks writing to a full pipe.
        Thread { while !handle.availableData.isEmpty {} }.start()
    }

    /// SIGKILL, as a crash or a pulled plug of the process would.
    func kill() {
        guard let p = process, p.isRunning else { return }
        Foundation.kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        process = nil
    }

    private static func executable() -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        return (path.split(separator: ":").map(String.init) + ["/usr/sbin", "/usr/bin"])
            .map { "\($0)/nats-server" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// A loopback port free now (the kernel's pick for a socket bound to port 0).
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 }
        }
        guard bound else { throw NSError(domain: "NATSServer", code: 2, userInfo: [NSLocalizedDescriptionKey: "no free port"]) }
        return Int(UInt16(bigEndian: addr.sin_port))
    }
}

/// What a hub subscription hands over, awaited with a deadline.
final class Received: @unchecked Sendable {
    private let condition = NSCondition()
    private var messages: [HubMessage] = []

    func add(_ m: HubMessage) {
        condition.lock()
        messages.append(m)
        condition.broadcast()
        condition.unlock()
    }

    /// The first `count` messages that came, waiting up to `seconds` for them (fewer
    /// when they do not come); they are taken.
    func take(_ count: Int, within seconds: Double) -> [HubMessage] {
        let deadline = Date().addingTimeInterval(seconds)
        condition.lock()
        defer { condition.unlock() }
        while messages.count < count && condition.wait(until: deadline) {}
        let taken = Array(messages.prefix(count))
        messages.removeFirst(taken.count)
        return taken
    }
}
