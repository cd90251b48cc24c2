// The servers a run starts (the relay, a baseline, nats-server), found beside this
// program, and stopped with it.

import CLISupport
import CSystem
import Foundation
import Synchronization

/// Where the relay and the benchmark's own programs are: beside this one (also when it is run from PATH).
let bin = ownExecutable.deletingLastPathComponent()

/// The servers a run has started: a run stopped by a signal stops them too (a terminal's
/// Ctrl-C reaches them anyway; a `kill` of the benchmark alone would leave them running).
enum Servers {
    private static let running = Mutex<Set<Int32>>([])
    /// The runs' temporary directories (a relay's store may hold hundreds of MiB by then).
    private static let directories = Mutex<Set<String>>([])
    /// Taken by whichever ends the process first, a signal's handler or the run: a run that
    /// fails because the handler stopped its server must not exit before the handler does.
    private static let exiting = Mutex<Void>(())

    /// Starts `p`, listed before a signal's handler can look. A child inherits the blocked
    /// signals of the thread that starts it, and this one may be a Dispatch thread with
    /// SIGTERM blocked: a server started so, that does not unblock it itself (an older
    /// relay measured with `--compare`), never stopped. So they are unblocked for the start.
    static func start(_ p: Process) throws {
        var before = sigset_t()
        cs_unblock_stop_signals(&before)
        defer { pthread_sigmask(SIG_SETMASK, &before, nil) }
        try running.withLock { servers in
            try p.run()
            servers.insert(p.processIdentifier)
        }
    }

    /// Stops `p` and waits for it.
    static func stop(_ p: Process) {
        p.terminate()
        p.waitUntilExit()
        running.withLock { _ = $0.remove(p.processIdentifier) }
    }

    /// Creates `dir` afresh, to be removed by `removeDirectory`, or on a signal.
    static func makeDirectory(_ dir: URL) throws {
        try? FileManager.default.removeItem(at: dir)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        directories.withLock { _ = $0.insert(dir.path) }
    }

    static func removeDirectory(_ dir: URL) {
        try? FileManager.default.removeItem(at: dir)
        directories.withLock { _ = $0.remove(dir.path) }
    }

    /// On SIGINT, SIGTERM or SIGHUP (unless ignored from the start, as under nohup): stop
    /// every running server, remove the runs' directories once the servers are gone (up to
    /// 10 s), then exit as the signal asks.
    static func stopOnSignals() -> [any DispatchSourceSignal] {
        ([SIGINT, SIGTERM] + (cs_signal_ignored(SIGHUP) != 0 ? [] : [SIGHUP])).map { sig in
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler {
                exiting.withLock { _ in
                    let pids = running.withLock { $0 }
                    for pid in pids { kill(pid, SIGTERM) }
                    let deadline = ContinuousClock.now + .seconds(10)
                    while pids.contains(where: isRunning), ContinuousClock.now < deadline { usleep(10_000) }
                    for dir in directories.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: dir) }
                    Glibc.exit(128 + sig)
                }
            }
            source.resume()
            return source
        }
    }

    /// Whether `pid` is still running (neither gone nor a zombie waiting to be reaped).
    private static func isRunning(_ pid: Int32) -> Bool {
        guard let state = procStat(pid)?.first else { return false }
        return state != "Z"
    }

    /// Ends the process with `code`, unless a signal's handler is already ending it.
    static func exit(_ code: Int32) -> Never {
        exiting.withLock { _ -> Never in Glibc.exit(code) }
    }
}

/// Starts a server process (a path, or a name beside this program) and waits for the line
/// that says it listens (on its stderr, with `onStderr`: nats-server's log).
func startServer(_ executable: String, _ args: [String], readyWord: String, onStderr: Bool = false) throws -> Process {
    let p = Process()
    p.executableURL = executable.contains("/") ? URL(fileURLWithPath: executable) : bin.appendingPathComponent(executable)
    guard FileManager.default.isExecutableFile(atPath: p.executableURL!.path) else {
        throw CLIError.failure(
            "cannot run \(p.executableURL!.path): no such program; build it with `swift build -c release`"
                + (executable.contains("/") ? "" : " (it is looked for beside permission-bench)"))
    }
    p.arguments = args
    let out = Pipe()
    p.standardOutput = onStderr ? FileHandle(forWritingAtPath: "/dev/null") : out
    p.standardError = onStderr ? out : FileHandle(forWritingAtPath: "/dev/null")
    try Servers.start(p)
    var seen = ""
    while !seen.contains(readyWord) {
        let chunk = out.fileHandleForReading.availableData
        if chunk.isEmpty { throw CLIError.failure("\(executable) exited before it was ready") }
        seen += String(decoding: chunk, as: UTF8.self)
    }
    // Keep reading what it says after, so that it never blocks on a full pipe.
    let handle = out.fileHandleForReading
    Thread { while !handle.availableData.isEmpty {} }.start()
    return p
}

/// nats-server, for the cross-device point's hub.
func natsServer() throws -> String {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    guard
        let found = (path.split(separator: ":").map(String.init) + ["/usr/sbin", "/usr/bin"]).map({ $0 + "/nats-server" })
            .first(where: FileManager.default.isExecutableFile(atPath:))
    else { throw CLIError.failure("--cross-device needs nats-server (apt-get install nats-server)") }
    return found
}

/// A loopback TCP port free now (the kernel's pick for a socket bound to port 0).
func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw CLIError.failure("no free loopback port for the hub") }
    return Int(UInt16(bigEndian: address.sin_port))
}
