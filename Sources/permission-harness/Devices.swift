// For scenarios with several devices: the family hub (a real nats-server with
// JetStream on a loopback port, killed and started again on the same port and store)
// and each device's link to it, through a small TCP proxy the harness can cut and
// restore as a network would.

import Foundation
import Glibc

/// nats-server -js on a loopback port, with a store of its own.
final class HubServer {
    let port: Int
    private let store: URL
    private let executable: String
    private var process: Process?
    /// Told of each nats-server process as it starts.
    private let started: (Process) -> Void

    init(directory: URL, started: @escaping (Process) -> Void) throws {
        self.started = started
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        guard
            let found = (path.split(separator: ":").map(String.init) + ["/usr/sbin", "/usr/bin"]).map({ $0 + "/nats-server" })
                .first(where: FileManager.default.isExecutableFile(atPath:))
        else {
            throw ScenarioFailure(description: "scenarios with devices need nats-server (apt-get install nats-server)")
        }
        executable = found
        port = try loopbackListener().port  // closed at once: free for the server
        store = directory.appendingPathComponent("hub")
        try start()
    }

    deinit { kill() }

    func start() throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: executable)
        p.arguments = ["-js", "-a", "127.0.0.1", "-p", "\(port)", "-sd", store.path]
        let log = Pipe()
        p.standardError = log
        p.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        try p.run()
        started(p)
        var seen = ""
        let handle = log.fileHandleForReading
        while !seen.contains("Server is ready") {
            let chunk = handle.availableData
            if chunk.isEmpty { throw ScenarioFailure(description: "the hub (nats-server) did not start: \(seen)") }
            seen += String(decoding: chunk, as: UTF8.self)
        }
        Thread { while !handle.availableData.isEmpty {} }.start()  // never blocked on a full pipe
        process = p
    }

    /// SIGKILL.
    func kill() {
        guard let p = process, p.isRunning else { return }
        Glibc.kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        process = nil
    }
}

/// A TCP proxy from a loopback port to the hub's: while cut, every connection through it
/// is closed and new ones are closed as they come.
final class LinkProxy: @unchecked Sendable {
    let port: Int
    private let target: Int
    private let listener: Int32
    private let lock = NSLock()
    private var cut = false
    private var open: Set<Int32> = []
    /// Signalled once the accepting thread has ended (and closed the listener).
    private let acceptingEnded = DispatchSemaphore(value: 0)

    init(to target: Int) throws {
        self.target = target
        (listener, port) = try loopbackListener(listening: true)
        Thread { [self] in
            accepting()
            // Closed here, not by `close`: the accepting thread may be just about to call
            // accept, and a number closed meanwhile can be another socket's by then.
            Glibc.close(listener)
            acceptingEnded.signal()
        }.start()
    }

    /// Stops the proxy: its listener and every connection through it; returns once the
    /// listener is closed. (Its accepting thread holds it until then.)
    func close() {
        shutdown(listener, Int32(SHUT_RDWR))  // accept fails from now on
        acceptingEnded.wait()
        setCut(true)
    }

    /// Cuts the link (`true`) or restores it.
    func setCut(_ value: Bool) {
        lock.withLock {
            cut = value
            if value { for fd in open { shutdown(fd, Int32(SHUT_RDWR)) } }
        }
    }

    private func accepting() {
        while true {
            let client = accept(listener, nil, nil)
            guard client >= 0 else {
                if errno == EINTR { continue }
                return
            }
            let server = connectLoopback(target)
            let admitted = lock.withLock { () -> Bool in
                guard !cut, server >= 0 else { return false }
                open.formUnion([client, server])
                return true
            }
            guard admitted else {
                Glibc.close(client)
                if server >= 0 { Glibc.close(server) }
                continue
            }
            Thread { [self] in pump(from: client, to: server) }.start()
            Thread { [self] in pump(from: server, to: client) }.start()
        }
    }

    private func pump(from: Int32, to: Int32) {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(from, &buffer, buffer.count)
            // MSG_NOSIGNAL: a peer gone (the link cut) is an error here, not a SIGPIPE.
            guard n > 0, send(to, buffer, n, Int32(MSG_NOSIGNAL)) == n else { break }
        }
        // One side ended: end both; the descriptors close once both pumps are done.
        shutdown(from, Int32(SHUT_RDWR))
        shutdown(to, Int32(SHUT_RDWR))
        lock.withLock {
            if open.remove(from) == nil { Glibc.close(from) }
            if open.remove(to) == nil { Glibc.close(to) }
        }
    }
}

/// A socket bound to a free loopback port (listening, or closed at once to leave the port free).
private func loopbackListener(listening: Bool = false) throws -> (fd: Int32, port: Int) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    var address = loopback(0)
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard fd >= 0, bound, !listening || listen(fd, 64) == 0 else {
        close(fd)
        throw ScenarioFailure(description: "no free loopback port: \(String(cString: strerror(errno)))")
    }
    if !listening { close(fd) }
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}

private func connectLoopback(_ port: Int) -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    var address = loopback(port)
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
    }
    if !connected {
        close(fd)
        return -1
    }
    return fd
}

private func loopback(_ port: Int) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = UInt16(port).bigEndian
    return address
}
