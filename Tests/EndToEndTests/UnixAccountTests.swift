// The family computer: members bound to Unix accounts say hello by their account, with
// no token anywhere; no other account can act as them. Needs root (to create accounts
// and run programs as them), as CI runs.

import Foundation
import XCTest

final class UnixAccountTests: XCTestCase {
    private var accounts: [String] = []

    override func tearDown() {
        for name in accounts { _ = command("/usr/sbin/userdel", [name]) }
    }

    /// Runs a program to its end: status, stdout, stderr.
    private func command(_ path: String, _ args: [String], env: [String: String] = [:]) -> (status: Int32, out: String, err: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: path)
        p.arguments = args
        p.environment = ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"].merging(env) { $1 }
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        do { try p.run() } catch { return (-1, "", "\(error)") }
        let o = out.fileHandleForReading.readDataToEndOfFile(), e = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: o, as: UTF8.self), String(decoding: e, as: UTF8.self))
    }

    private func account(_ name: String) throws -> String {
        let r = command("/usr/sbin/useradd", ["--no-create-home", "--shell", "/usr/sbin/nologin", name])
        guard r.status == 0 else { throw XCTSkip("cannot create the account \(name): \(r.err)") }
        accounts.append(name)
        return name
    }

    /// Runs one of the programs as `user`, with a state directory of its own.
    private func run(as user: String, _ program: String, _ args: [String], socket: String, state: URL) -> (
        status: Int32, out: String, err: String
    ) {
        command(
            "/usr/sbin/runuser",
            [
                "-u", user, "--", "/usr/bin/env", "PERMISSION_RELAY_SOCKET=\(socket)", "PERMISSION_STATE_DIR=\(state.path)/\(user)",
                productsDirectory.appendingPathComponent(program).path,
            ] + args)
    }

    func testAFamilyOnOneComputerAsksAndAnswersWithNoTokenAnywhere() throws {
        guard geteuid() == 0 else { throw XCTSkip("creating Unix accounts needs root (CI runs as root)") }
        let tag = String(getpid() % 100_000)
        let child = try account("prc\(tag)"), parent = try account("prg\(tag)"), stranger = try account("pro\(tag)")
        let relay = try RelayProcess()
        try relay.start()
        // Root's relay is the machine's, as the system unit's socket is: any account may
        // connect; who it is, the relay asks the kernel.
        var st = stat()
        XCTAssertEqual(stat(relay.socket, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o666)
        let state = relay.dir.appendingPathComponent("state")
        for user in [child, parent, stranger] {
            try FileManager.default.createDirectory(at: state.appendingPathComponent(user), withIntermediateDirectories: true)
            XCTAssertEqual(command("/bin/chown", [user, state.appendingPathComponent(user).path]).status, 0)
        }
        XCTAssertEqual(chmod(relay.dir.path, 0o755), 0)
        chmod(state.path, 0o755)

        let admin = ["--socket", relay.socket]
        XCTAssertEqual(runRelay(["family", "create", "smiths"] + admin).status, 0)
        let added = runRelay(["member", "add", "smiths", "alex", "--role", "child", "--unix-user", child] + admin)
        XCTAssertEqual(added.status, 0, added.stderr)
        XCTAssertTrue(added.stdout.contains("bound to the account with uid"), added.stdout)
        XCTAssertFalse(added.stdout.contains("token:"), "no token is issued")
        XCTAssertEqual(runRelay(["member", "add", "smiths", "sam", "--role", "guardian", "--unix-user", parent] + admin).status, 0)
        let twice = runRelay(["member", "add", "smiths", "kim", "--role", "child", "--unix-user", child] + admin)
        XCTAssertEqual(twice.status, 1)
        XCTAssertTrue(twice.stderr.contains("is already bound to member alex"), twice.stderr)
        let nobody = runRelay(["member", "add", "smiths", "kim", "--role", "child", "--unix-user", "no-such-account-\(tag)"] + admin)
        XCTAssertEqual(nobody.status, 1)
        XCTAssertTrue(nobody.stderr.contains("no Unix account no-such-account-\(tag)"), nobody.stderr)

        // The child asks from its account, the guardian answers from hers: no token anywhere.
        let ask = Process()
        ask.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
        ask.arguments = [
            "-u", child, "--", "/usr/bin/env", "PERMISSION_RELAY_SOCKET=\(relay.socket)",
            productsDirectory.appendingPathComponent("permission-child").path, "ask", "phone:+15550100", "--member", "alex", "--wait",
        ]
        let askOut = Pipe()
        ask.standardOutput = askOut
        ask.standardError = FileHandle.nullDevice
        try ask.run()
        let bot = run(
            as: parent, "permission-guardian", ["auto", "--approve", "--count", "1", "--member", "sam"], socket: relay.socket, state: state)
        XCTAssertEqual(bot.status, 0, bot.err)
        let answer = String(decoding: askOut.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        ask.waitUntilExit()
        XCTAssertEqual(ask.terminationStatus, 0)
        XCTAssertEqual(answer, "approved: Approve (by sam)\n")

        // Nobody else is alex, and alex's account is nobody else.
        let impostor = run(as: stranger, "permission-child", ["limits", "--member", "alex"], socket: relay.socket, state: state)
        XCTAssertEqual(impostor.status, 1)
        XCTAssertTrue(impostor.err.contains(#"no member "alex" is bound to this Unix account"#), impostor.err)
        XCTAssertTrue(
            impostor.err.hasSuffix("check --member, or give credentials (--credentials FILE) if the member has a token\n"), impostor.err)
        let asGuardian = run(as: child, "permission-guardian", ["pending", "--member", "sam"], socket: relay.socket, state: state)
        XCTAssertEqual(asGuardian.status, 1, "a child's account cannot act as its guardian")
        XCTAssertTrue(asGuardian.err.hasSuffix(#"is bound to member "alex", and says hello only as that member"# + "\n"), asGuardian.err)
        let adminAsChild = run(as: child, "permission-relay", ["status", "--socket", relay.socket], socket: relay.socket, state: state)
        XCTAssertEqual(adminAsChild.status, 1, "only root and the relay's user administer")
    }
}
