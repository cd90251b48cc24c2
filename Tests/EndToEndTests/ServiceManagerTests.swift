// The relay as systemd starts it: a listening socket passed as fd 3 (socket activation),
// readiness and stopping told on NOTIFY_SOCKET, and log lines the journal reads.

import CSystem
import Foundation
import RelayProtocol
import RelayServer
import XCTest

final class ServiceManagerTests: XCTestCase {
    func testASocketActivatedRelayServesTheSocketItWasGivenAndSaysWhenItIsReady() throws {
        let dir = URL(fileURLWithPath: "/tmp").appendingPathComponent("psm-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let socketPath = dir.appendingPathComponent("activated.sock").path
        let listener = cs_listen_unix(socketPath, 16)
        XCTAssertGreaterThanOrEqual(listener, 0)
        defer { close(listener) }
        let notify = try NotifySocket(path: dir.appendingPathComponent("notify").path)
        let stderrPath = dir.appendingPathComponent("stderr").path
        XCTAssertTrue(FileManager.default.createFile(atPath: stderrPath, contents: nil))
        let stderrFD = open(stderrPath, O_WRONLY | O_APPEND | O_CLOEXEC)
        defer { close(stderrFD) }
        var st = stat()
        XCTAssertEqual(fstat(stderrFD, &st), 0)

        // The shell sets LISTEN_PID to its own pid, which the relay takes over with exec.
        let pid = try spawnWithListener(
            [
                "/bin/sh", "-c", #"LISTEN_PID=$$ exec "$0" serve --data "$1" --log-level debug"#, relayBinary,
                dir.appendingPathComponent("data").path,
            ],
            listener: listener, stderr: stderrFD,
            environment: [
                "LISTEN_FDS=1", "NOTIFY_SOCKET=\(notify.path)", "JOURNAL_STREAM=\(st.st_dev):\(st.st_ino)",
                "PATH=/usr/bin:/bin",
            ])
        var exited = false
        defer { if !exited { kill(pid, SIGKILL); var s: Int32 = 0; waitpid(pid, &s, 0) } }

        let ready = notify.receive(within: 20)
        XCTAssertTrue(ready?.contains("READY=1") ?? false, ready ?? "nothing")
        XCTAssertTrue(
            ready?.contains("STATUS=listening on \(socketPath), the socket from the service manager") ?? false, ready ?? "nothing")
        XCTAssertTrue(ready?.contains("MAINPID=\(pid)") ?? false, ready ?? "nothing")

        // A whole cycle through the socket the relay was given.
        let admin = Client(try BlockingConnection(path: socketPath))
        admin.c.setTimeout(seconds: 10)
        XCTAssertEqual(try admin.request(["type": "hello", "protocol": 1, "admin": true])["type"]?.string, "welcome")
        XCTAssertEqual(try admin.request(["type": "createFamily", "family": "f"])["type"]?.string, "ok")
        var tokens: [String: String] = [:]
        for (m, role) in [("c", "child"), ("g", "guardian")] {
            tokens[m] = try admin.request(["type": "addMember", "family": "f", "member": .string(m), "role": .string(role)])["token"]?
                .string
        }
        let child = Client(try BlockingConnection(path: socketPath))
        let guardian = Client(try BlockingConnection(path: socketPath))
        for c in [child, guardian] { c.c.setTimeout(seconds: 10) }
        _ = try child.hello("c", tokens["c"]!, session: "app")
        _ = try child.request(["type": "subscribe", "topics": ["communication"]])
        _ = try guardian.hello("g", tokens["g"]!)
        let id = UUID().uuidString
        XCTAssertEqual(try child.request(["type": "ask", "question": question(id)])["type"]?.string, "ok")
        XCTAssertEqual(try guardian.event("question")["question"]?["id"]?.string, id)
        XCTAssertEqual(try guardian.request(["type": "answer", "questionId": .string(id), "choice": "approve"])["type"]?.string, "ok")
        XCTAssertEqual(try child.event("response")["choice"]?["id"]?.string, "approve")

        kill(pid, SIGTERM)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        exited = true
        XCTAssertEqual((status >> 8) & 0xFF, 0, "a clean stop")
        XCTAssertTrue(notify.receive(within: 5)?.contains("STOPPING=1") ?? false)
        var still = stat()
        XCTAssertEqual(lstat(socketPath, &still), 0, "the socket file stays: it is the service manager's")

        // Log lines as the journal reads them: a priority prefix, no time of its own.
        let lines = try String(contentsOfFile: stderrPath, encoding: .utf8).split(separator: "\n")
        XCTAssertFalse(lines.isEmpty)
        for line in lines {
            XCTAssertTrue(line.hasPrefix("<6>") || line.hasPrefix("<7>") || line.hasPrefix("<4>"), String(line))
            XCTAssertFalse(line.contains("T") && line.dropFirst(3).prefix(4).allSatisfy(\.isNumber), "no timestamp: \(line)")
        }
        XCTAssertTrue(lines.contains { $0.hasPrefix("<6>shutting down") }, lines.joined(separator: "\n"))
    }

    /// `scripts/install.sh --user` puts the programs and the units where systemd looks, and
    /// systemd accepts the units (user and system) as they are installed.
    func testTheInstalledUnitsAreOnesSystemdAccepts() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze") else {
            return XCTFail("systemd-analyze is needed for this test (`apt-get install systemd`; .ci/run installs it)")
        }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let home = URL(fileURLWithPath: "/tmp").appendingPathComponent("pin-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: home.appendingPathComponent("run"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: home) }
        let env = [
            "HOME": home.path, "PATH": "/usr/bin:/bin", "PERMISSION_BIN_DIR": productsDirectory.path,
            "XDG_RUNTIME_DIR": home.appendingPathComponent("run").path,
        ]
        let install = run(["/bin/bash", root.appendingPathComponent("scripts/install.sh").path, "--user", "--no-start"], env: env)
        XCTAssertEqual(install.status, 0, install.output)
        let units = home.appendingPathComponent(".config/systemd/user")
        for program in ["permission-relay", "permission-child", "permission-guardian"] {
            XCTAssertTrue(FileManager.default.isExecutableFile(atPath: home.appendingPathComponent(".local/bin/\(program)").path), program)
        }
        let service = try String(contentsOf: units.appendingPathComponent("permission-relay.service"), encoding: .utf8)
        XCTAssertTrue(service.contains("ExecStart=\(home.path)/.local/bin/permission-relay serve"), service)
        let user = run(
            ["/usr/bin/systemd-analyze", "--user", "verify"]
                + ["socket", "service"].map { units.appendingPathComponent("permission-relay.\($0)").path },
            env: env)
        XCTAssertEqual(user.status, 0, user.output)

        // The system units, filled in as install.sh --system does.
        let system = home.appendingPathComponent("system")
        try FileManager.default.createDirectory(at: system, withIntermediateDirectories: true)
        for kind in ["socket", "service"] {
            let unit = try String(
                contentsOf: root.appendingPathComponent("scripts/systemd/system/permission-relay.\(kind)"), encoding: .utf8)
            try unit.replacingOccurrences(of: "@BINDIR@", with: productsDirectory.path)
                .write(to: system.appendingPathComponent("permission-relay.\(kind)"), atomically: true, encoding: .utf8)
        }
        let verified = run(
            ["/usr/bin/systemd-analyze", "verify"]
                + ["socket", "service"].map { system.appendingPathComponent("permission-relay.\($0)").path },
            env: env)
        XCTAssertEqual(verified.status, 0, verified.output)
    }

    /// Paths given to install.sh are the caller's, and programs that are not there stop it
    /// before it makes anything.
    func testInstallTakesPathsFromWhereItIsRunAndChecksTheProgramsFirst() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let here = URL(fileURLWithPath: "/tmp").appendingPathComponent("pin-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: here, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: here) }
        try FileManager.default.createSymbolicLink(at: here.appendingPathComponent("built"), withDestinationURL: productsDirectory)
        let script = root.appendingPathComponent("scripts/install.sh").path
        func install(bin: String, prefix: String) -> (status: Int32, output: String) {
            run(
                [
                    "/bin/bash", "-c",
                    "cd \(here.path) && PERMISSION_BIN_DIR=\(bin) exec /bin/bash \(script) --user --no-start --prefix \(prefix)",
                ],
                env: ["HOME": here.path, "PATH": "/usr/bin:/bin"])
        }
        let installed = install(bin: "built", prefix: "programs")
        XCTAssertEqual(installed.status, 0, installed.output)
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: here.appendingPathComponent("programs/bin/permission-relay").path))
        let missing = install(bin: "nothing", prefix: "elsewhere")
        XCTAssertEqual(missing.status, 1, missing.output)
        XCTAssertTrue(missing.output.contains("\(here.path)/nothing/permission-relay is not there"), missing.output)
        XCTAssertFalse(FileManager.default.fileExists(atPath: here.appendingPathComponent("elsewhere").path), "nothing made")
    }

    private func run(_ argv: [String], env: [String: String]) -> (status: Int32, output: String) {
        runToEnd(process(argv, environment: env))
    }

    /// Starts `argv` with `listener` as its fd 3 and `stderr` as its fd 2.
    private func spawnWithListener(_ argv: [String], listener: Int32, stderr: Int32, environment: [String]) throws -> pid_t {
        // A descriptor above 3 to dup from: dup2 onto itself would leave close-on-exec set.
        let high = fcntl(listener, F_DUPFD_CLOEXEC, 10)
        defer { close(high) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, high, 3)
        posix_spawn_file_actions_adddup2(&actions, stderr, 2)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        let args = argv.map { strdup($0) } + [nil]
        let env = environment.map { strdup($0) } + [nil]
        defer {
            args.forEach { free($0) }
            env.forEach { free($0) }
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0], &actions, nil, args, env)
        guard rc == 0 else { throw ServerError("posix_spawn failed: \(rc)") }
        return pid
    }
}

/// A datagram socket playing the service manager's NOTIFY_SOCKET.
private final class NotifySocket {
    let path: String
    private let fd: Int32

    init(path: String) throws {
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        let bound = withUnixAddress(path) { Glibc.bind(fd, $0, $1) }
        guard fd >= 0, bound == 0 else { throw ServerError("cannot bind \(path): \(String(cString: strerror(errno)))") }
    }

    deinit { close(fd) }

    /// The next message, or nil if none comes within `seconds`.
    func receive(within seconds: Int) -> String? {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&p, 1, Int32(seconds * 1000)) == 1 else { return nil }
        var buf = [UInt8](repeating: 0, count: 4096)
        let n = recv(fd, &buf, buf.count, 0)
        return n > 0 ? String(decoding: buf[0..<n], as: UTF8.self) : nil
    }
}

/// A relay run as root must not be steered by another user: it refuses directories others
/// may write to or own, and links in place of its files, and says what to fix.
final class DirectorySafetyTests: XCTestCase {
    private func serve(_ socket: String, _ data: String) -> (status: Int32, stderr: String) {
        let r = runRelay(["serve", "--socket", socket, "--data", data])
        return (r.status, r.stderr)
    }

    func testDirectoriesOthersControlAndLinksToFilesAreRefused() throws {
        let dir = URL(fileURLWithPath: "/tmp").appendingPathComponent("psafe-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        func make(_ name: String, mode: Int) throws -> String {
            let path = dir.appendingPathComponent(name).path
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            chmod(path, mode_t(mode))
            return path
        }
        let open = try make("open", mode: 0o777)
        var r = serve(dir.appendingPathComponent("s1").path, open)
        XCTAssertEqual(r.status, 1)
        XCTAssertEqual(r.stderr, "permission-relay: \(open) may be written by others (mode 777); make it private: chmod 700 \(open)\n")

        // Sticky and root's, as /tmp is: others may still put files of theirs in it.
        let shared = try make("shared", mode: 0o1777)
        r = serve(dir.appendingPathComponent("s0").path, shared)
        XCTAssertEqual(r.status, 1)
        XCTAssertTrue(r.stderr.contains("\(shared) may be written by others (mode 1777)"), r.stderr)

        let socketDir = try make("sockets", mode: 0o733)
        r = serve(socketDir + "/relay.sock", try make("data1", mode: 0o700))
        XCTAssertEqual(r.status, 1)
        XCTAssertTrue(r.stderr.contains("\(socketDir) may be written by others (mode 733)"), r.stderr)

        let data = try make("data2", mode: 0o700)
        let precious = dir.appendingPathComponent("precious").path
        try "keep me".write(toFile: precious, atomically: true, encoding: .utf8)
        XCTAssertEqual(symlink(precious, data + "/relay.db"), 0)
        r = serve(dir.appendingPathComponent("s2").path, data)
        XCTAssertEqual(r.status, 1)
        XCTAssertTrue(r.stderr.contains("\(data)/relay.db is not a regular file (a link is never followed)"), r.stderr)
        XCTAssertEqual(try String(contentsOfFile: precious, encoding: .utf8), "keep me")

        if geteuid() == 0 {  // only root can give a directory away
            let theirs = try make("theirs", mode: 0o700)
            XCTAssertEqual(chown(theirs, 65534, 65534), 0)
            r = serve(dir.appendingPathComponent("s3").path, theirs)
            XCTAssertEqual(r.status, 1)
            XCTAssertTrue(r.stderr.contains("\(theirs) belongs to uid 65534, not to this user (uid 0)"), r.stderr)
            // A file of theirs where the store goes: they could read it, or change it.
            let mine = try make("mine", mode: 0o700)
            XCTAssertTrue(FileManager.default.createFile(atPath: mine + "/relay.db", contents: nil))
            XCTAssertEqual(chown(mine + "/relay.db", 65534, 65534), 0)
            r = serve(dir.appendingPathComponent("s4").path, mine)
            XCTAssertEqual(r.status, 1)
            XCTAssertTrue(r.stderr.contains("\(mine)/relay.db belongs to uid 65534, not to this user (uid 0)"), r.stderr)
            // Their own directory, which they may not write to: what to do about it.
            let readOnly = try make("read-only", mode: 0o500)
            XCTAssertEqual(chown(readOnly, 65534, 65534), 0)
            let theirSockets = try make("their-sockets", mode: 0o700)
            XCTAssertEqual(chown(theirSockets, 65534, 65534), 0)
            XCTAssertEqual(chmod(dir.path, 0o755), 0)
            let asThem = runRelay(["serve", "--socket", theirSockets + "/s", "--data", readOnly], asUser: 65534)
            XCTAssertEqual(asThem.status, 1)
            XCTAssertTrue(
                asThem.stderr.contains("Permission denied; let this user write to \(readOnly) (chmod 700 \(readOnly))"), asThem.stderr)
        }
    }
}
