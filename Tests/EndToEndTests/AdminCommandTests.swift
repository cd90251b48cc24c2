// permission-relay's admin commands as an operator runs them: what a failure prints
// (nothing on stdout, also with --json), the help of a command group, what status
// counts, what family list shows, and what adding a member id that is taken says.

import Foundation
import RelayProtocol
import RelayServer
import XCTest

final class AdminCommandTests: XCTestCase {
    private var relay: RelayProcess!
    private var s: [String] { ["--socket", relay.socket] }

    override func setUpWithError() throws {
        relay = try RelayProcess()
        try relay.start()
    }

    override func tearDown() {
        relay.crash()
        relay = nil
    }

    /// Asserts that `args` failed with status 1, nothing on stdout and `stderr` as its one line.
    private func assertFails(_ args: [String], _ stderr: String, file: StaticString = #filePath, line: UInt = #line) {
        let r = runRelay(args)
        let what = args.joined(separator: " ")
        XCTAssertEqual(r.status, 1, what, file: file, line: line)
        XCTAssertEqual(r.stdout, "", what, file: file, line: line)
        XCTAssertEqual(r.stderr, stderr + "\n", what, file: file, line: line)
    }

    func testAFailedCommandPrintsNothingOnStdoutAlsoWithJSON() throws {
        XCTAssertEqual(runRelay(["family", "create", "smiths"] + s).status, 0)
        XCTAssertEqual(runRelay(["member", "add", "smiths", "alex", "--role", "child"] + s).status, 0)
        for json in [["--json"], []] {
            assertFails(["family", "create", "smiths"] + json + s, "permission-relay: conflict: family smiths already exists")
            assertFails(
                ["member", "add", "smiths", "alex", "--role", "child"] + json + s,
                "permission-relay: conflict: member alex already exists, in family smiths (member ids are unique across all families)")
            assertFails(["member", "add", "nobody", "kim", "--role", "child"] + json + s, "permission-relay: notFound: no family nobody")
            assertFails(["member", "remove", "ghost"] + json + s, "permission-relay: notFound: no member ghost")
            assertFails(["token", "rotate", "ghost"] + json + s, "permission-relay: notFound: no member ghost")
            assertFails(["limits", "set", "ghost", "on"] + json + s, "permission-relay: notFound: no child ghost")
        }
        // No relay at all: each command says so in one line, and prints nothing else.
        let gone = "/tmp/no-relay-\(UUID().uuidString.prefix(8)).sock"
        for args in [
            ["family", "create", "smiths"], ["member", "add", "smiths", "sam", "--role", "guardian"], ["member", "remove", "alex"],
            ["token", "rotate", "alex"], ["limits", "set", "alex", "off"], ["status"],
        ] {
            assertFails(
                args + ["--json", "--socket", gone],
                "permission-relay: cannot connect to \(gone): there is no socket there (is `permission-relay serve` running, and is"
                    + " this its socket?)"
            )
        }
        // A directory given for the socket, and a socket this user may not use, are named as such.
        assertFails(
            ["status", "--socket", relay.dir.path],
            "permission-relay: cannot connect to \(relay.dir.path): it is a directory; give the relay's socket, as `permission-relay serve` prints it"
        )
        if geteuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") {
            XCTAssertEqual(chmod(relay.dir.path, 0o700), 0)
            let r = runRelay(["status", "--socket", relay.socket], asUser: 65534)
            XCTAssertEqual(r.status, 1)
            XCTAssertTrue(r.stderr.contains("\(relay.socket): permission denied (the socket, or a directory above it"), r.stderr)
            // Root's socket is open to every account, and only root may administer (§3).
            XCTAssertEqual(chmod(relay.dir.path, 0o755), 0)
            let other = runRelay(["status", "--socket", relay.socket], asUser: 65534)
            XCTAssertEqual(other.status, 1)
            XCTAssertEqual(other.stdout, "")
            XCTAssertTrue(other.stderr.contains("the relay refused an admin session"), other.stderr)
        }
        // What succeeds is unchanged: one JSON object.
        let added = runRelay(["member", "add", "smiths", "sam", "--role", "guardian", "--json"] + s)
        XCTAssertEqual(added.status, 0)
        XCTAssertEqual(added.stderr, "")
        XCTAssertEqual(try JSON.parse(added.stdout.trimmingCharacters(in: .newlines))["member"]?.string, "sam")
    }

    /// Output that cannot be written (a full disk) fails the command; a token shown only
    /// once is then said on stderr, since the member is added all the same.
    func testOutputThatCannotBeWrittenFailsTheCommandAndKeepsTheToken() throws {
        XCTAssertEqual(runRelay(["family", "create", "smiths"] + s).status, 0)
        let full = try XCTUnwrap(FileHandle(forWritingAtPath: "/dev/full"))
        let added = runRelay(["member", "add", "smiths", "sam", "--role", "guardian", "--json"] + s, stdout: full)
        XCTAssertEqual(added.status, 1)
        let lines = added.stderr.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 2, added.stderr)
        XCTAssertTrue(lines.first?.hasPrefix("permission-relay: sam's token is ") ?? false, added.stderr)
        XCTAssertEqual(lines.last, "permission-relay: cannot write the output: No space left on device")
        let token = String(lines[0].dropFirst("permission-relay: sam's token is ".count).prefix { $0 != " " })
        let c = try BlockingConnection(path: relay.socket)
        try c.send(["type": "hello", "id": "h", "protocol": 1, "member": "sam", "token": .string(token)])
        XCTAssertEqual(try c.receive()?["type"]?.string, "welcome", "the token said on stderr is sam's")
        let listed = runRelay(["family", "list"] + s, stdout: full)
        XCTAssertEqual(listed.status, 1)
        XCTAssertEqual(listed.stderr, "permission-relay: cannot write the output: No space left on device\n")
    }

    func testAGroupsHelpListsItsCommandsWithExamples() throws {
        let groups: [String: [String]] = [
            "family": ["create FAMILY"],
            "member": ["add FAMILY MEMBER --role child|guardian [--unix-user ACCOUNT] [--credentials FILE]", "remove MEMBER"],
            "token": ["rotate MEMBER [--credentials FILE]"], "limits": ["set CHILD on|off"],
        ]
        for (group, commands) in groups {
            for args in [[group, "--help"], [group, "-h"], ["help", group]] {
                let r = runRelay(args)
                let what = args.joined(separator: " ")
                XCTAssertEqual(r.status, 0, what)
                XCTAssertTrue(r.stdout.contains("USAGE: permission-relay \(group) <command> [options]\n"), what + ":\n" + r.stdout)
                for c in commands { XCTAssertTrue(r.stdout.contains("\n  \(c)\n"), what + ": " + c + "\n" + r.stdout) }
                XCTAssertTrue(r.stdout.contains("EXAMPLES:\n  permission-relay \(group) "), what + ":\n" + r.stdout)
                XCTAssertFalse(r.stdout.contains("serve"), "not the top-level help: " + what)
            }
        }
        let add = runRelay(["member", "add", "--help"])
        XCTAssertEqual(add.status, 0)
        XCTAssertTrue(
            add.stdout.contains(
                "USAGE: permission-relay member add FAMILY MEMBER --role child|guardian [--unix-user ACCOUNT] [--credentials FILE] [--socket PATH] [--json]\n"
            ))
        XCTAssertFalse(add.stdout.contains("COMMANDS:"), add.stdout)
        XCTAssertEqual(runRelay(["help", "member", "add"]).stdout, add.stdout)

        let bare = runRelay(["member"])
        XCTAssertEqual(bare.status, 64)
        XCTAssertEqual(bare.stdout, "")
        XCTAssertEqual(bare.stderr, "permission-relay: member needs a command: add or remove (see `permission-relay --help`)\n")
        let unknown = runRelay(["member", "rename", "alex", "sasha"])
        XCTAssertEqual(unknown.status, 64)
        XCTAssertEqual(
            unknown.stderr,
            "permission-relay: unknown command \"member rename\" (member commands: add, remove) (see `permission-relay --help`)\n")
        let typo = runRelay(["famliy", "create", "smiths"])
        XCTAssertEqual(typo.status, 64)
        XCTAssertTrue(typo.stderr.contains("unknown command \"famliy create\" (did you mean family?)"), typo.stderr)
        XCTAssertFalse(runRelay(["bogus"]).stderr.contains("did you mean"), "nothing near it")
        // A command's wrong arguments point to its own help, which names its options.
        let short = runRelay(["member", "add", "smiths"])
        XCTAssertEqual(short.status, 64)
        XCTAssertTrue(short.stderr.hasSuffix(" (see `permission-relay member add --help`)\n"), short.stderr)
        // Ids the relay would refuse, and an empty socket path, are usage errors too.
        for (args, said) in [
            (["family", "create", ""], "FAMILY must be 1 to 64 letters, digits, '.', '_' or '-', not \"\""),
            (["member", "add", "smiths", "a b", "--role", "child"], "MEMBER must be 1 to 64 letters"),
            (["status", "--socket", ""], "--socket needs a value, not an empty one"),
            (["backup", "--data", ""], "--data needs a value, not an empty one"),
            (["backup", ""], "DEST needs a path, not an empty one"),
        ] {
            let r = runRelay(args)
            XCTAssertEqual(r.status, 64, "\(args)")
            XCTAssertTrue(r.stderr.contains(said), r.stderr)
        }
        let handshake = runRelay(["serve", "--handshake-timeout-seconds", "0"])
        XCTAssertEqual(handshake.status, 64, "every connection would be closed before its hello")
    }

    /// `--credentials FILE` writes the credentials for this user only, and a request that
    /// fails leaves the file as it was (a shell's `> FILE` would have emptied it).
    func testCredentialsGoToAPrivateFileOnlyOnSuccess() throws {
        XCTAssertEqual(runRelay(["family", "create", "smiths"] + s).status, 0)
        let file = relay.dir.appendingPathComponent("alex.json").path
        let added = runRelay(["member", "add", "smiths", "alex", "--role", "child", "--credentials", file] + s)
        XCTAssertEqual(added.status, 0, added.stderr)
        XCTAssertEqual(added.stdout, "added child alex to family smiths\ncredentials of alex written to \(file) (mode 0600)\n")
        let first = try String(contentsOfFile: file, encoding: .utf8)
        XCTAssertEqual(try JSON.parse(Array(first.utf8))["member"]?.string, "alex")
        XCTAssertEqual(try JSON.parse(Array(first.utf8))["token"]?.string?.count, 43)
        var st = stat()
        XCTAssertEqual(stat(file, &st), 0)
        XCTAssertEqual(st.st_mode & 0o777, 0o600)
        // Another member's credentials never go over a file that holds some.
        assertFails(
            ["member", "add", "smiths", "pat", "--role", "child", "--credentials", file] + s,
            "permission-relay: \(file) exists and holds alex's credentials: give a new file to --credentials, or remove that one if it"
                + " is not needed")
        XCTAssertEqual(try String(contentsOfFile: file, encoding: .utf8), first, "left as it was")
        let other = relay.dir.appendingPathComponent("other.json").path
        assertFails(
            ["member", "add", "smiths", "alex", "--role", "child", "--credentials", other] + s,
            "permission-relay: conflict: member alex already exists, in family smiths (member ids are unique across all families)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: other), "a refused request leaves no file")
        assertFails(
            ["token", "rotate", "pat", "--credentials", file] + s,
            "permission-relay: \(file) exists and holds alex's credentials: give a new file to --credentials, or remove that one if it"
                + " is not needed")
        // A file that cannot be written fails the command before anything changes.
        let nowhere = relay.dir.appendingPathComponent("no-such-dir/alex.json").path
        let unwritable = runRelay(["token", "rotate", "alex", "--credentials", nowhere] + s)
        XCTAssertEqual(unwritable.status, 1)
        XCTAssertTrue(unwritable.stderr.hasPrefix("permission-relay: cannot write the credentials to \(nowhere)"), unwritable.stderr)
        let c = try relay.connect()
        let token = try JSON.parse(Array(first.utf8))["token"]?.string ?? ""
        XCTAssertEqual(try c.hello("alex", token)["type"]?.string, "welcome", "the token was not rotated")
        let rotated = runRelay(["token", "rotate", "alex", "--credentials", file] + s)
        XCTAssertEqual(rotated.stdout, "credentials of alex written to \(file) (mode 0600)\n")
        XCTAssertNotEqual(try String(contentsOfFile: file, encoding: .utf8), first, "the new token")
    }

    func testStatusLeavesAdminConnectionsOutOfItsCounts() throws {
        XCTAssertTrue(runRelay(["status", "--help"]).stdout.contains("admin connections, this one included, are not counted"))
        let idle = runRelay(["status"] + s)
        XCTAssertEqual(idle.status, 0)
        XCTAssertTrue(idle.stdout.contains("connections: 0\nsessions: 0\n"), idle.stdout)
        // Which relay runs, as its --version says.
        let version = runRelay(["--version"]).stdout.split(separator: " ")[1]
        XCTAssertTrue(idle.stdout.contains("\nversion: \(version)\n"), idle.stdout)

        let tokens = try relay.provision(families: 1)
        let heldAdmin = try relay.admin()  // another admin connection, left open
        let child = try relay.connect()
        _ = try child.hello("c0", tokens["c0"]!)
        let silent = try relay.connect()  // yet to say hello: a connection without a session
        let busy = try JSON.parse(runRelay(["status", "--json"] + s).stdout.trimmingCharacters(in: .newlines))
        XCTAssertEqual(busy["connections"]?.int, 2)
        XCTAssertEqual(busy["sessions"]?.int, 1)
        _ = (heldAdmin, silent)
    }

    func testFamilyListShowsEveryFamilyAcrossPagesAndFamilyShowOne() throws {
        XCTAssertEqual(runRelay(["family", "list"] + s).stdout, "no families yet (create one: permission-relay family create FAMILY)\n")
        // Output room for 64 KiB: a reply holds 48 KiB of families, a few hundred.
        let small = try RelayProcess(flags: ["--max-output-bytes", "65536", "--max-frame-bytes", "32768"])
        try small.start()
        defer { small.crash() }
        let tokens = try small.provision(families: 600)
        let child = try small.connect()
        _ = try child.hello("c7", tokens["c7"]!)
        XCTAssertEqual(try child.request(["type": "ask", "question": question()])["type"]?.string, "ok")

        let listed = runRelay(["family", "list", "--json", "--socket", small.socket])
        XCTAssertEqual(listed.status, 0, listed.stderr)
        let reply = try JSON.parse(listed.stdout.trimmingCharacters(in: .newlines))
        let families = reply["families"]?.array?.compactMap { $0.object } ?? []
        XCTAssertEqual(families.compactMap { $0["family"]?.string }, (0..<600).map { "f\($0)" }.sorted(), "all, in order, once")
        XCTAssertNil(reply["more"])
        XCTAssertEqual(runRelay(["family", "list", "--socket", small.socket]).stdout.split(separator: "\n").count, 1800)

        XCTAssertEqual(runRelay(["limits", "set", "c7", "off", "--socket", small.socket]).stdout, "communication limits off for c7\n")
        let shown = runRelay(["family", "show", "f7", "--socket", small.socket])
        XCTAssertEqual(
            shown.stdout,
            """
            f7
              c7  child     limits off, 1 pending question, 1 connection
              g7  guardian  not connected

            """)
        assertFails(["family", "show", "f600", "--socket", small.socket], "permission-relay: notFound: no family f600")
    }

    func testMemberIdsAreUniqueAcrossAllFamiliesAndSaySo() throws {
        let help = runRelay(["member", "add", "--help"]).stdout
        XCTAssertTrue(help.contains("Member ids are unique across all families"), help)
        for family in ["smiths", "joneses"] { XCTAssertEqual(runRelay(["family", "create", family] + s).status, 0) }
        XCTAssertEqual(runRelay(["member", "add", "smiths", "alex", "--role", "child"] + s).status, 0)
        assertFails(
            ["member", "add", "joneses", "alex", "--role", "guardian", "--json"] + s,
            "permission-relay: conflict: member alex already exists, in family smiths (member ids are unique across all families)")
        XCTAssertEqual(runRelay(["member", "remove", "alex"] + s).status, 0)
        assertFails(
            ["member", "add", "joneses", "alex", "--role", "child"] + s,
            "permission-relay: conflict: member id alex belonged to a removed member and is never reused"
                + " (member ids are unique across all families)")
    }
}
