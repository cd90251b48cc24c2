// permission-child and permission-guardian as a user runs them, against the real relay.

import Foundation
import RelayProtocol
import XCTest

/// A running client program whose stdout is read line by line as it comes.
final class ProgramRun {
    let process = Process()
    private let out = Pipe()
    private var buffer = ""
    private(set) var lines: [String] = []

    /// `stderr`: a new file to write the program's stderr to (by default it is dropped);
    /// `stderrInLines`: read it with stdout instead; `stdout`: where stdout goes instead.
    init(
        _ name: String, _ args: [String], env: [String: String], stderr: String? = nil, stderrInLines: Bool = false,
        stdout: FileHandle? = nil
    ) throws {
        process.executableURL = productsDirectory.appendingPathComponent(name)
        process.arguments = args
        process.environment = ProcessInfo.processInfo.environment.merging(env) { $1 }
        process.standardOutput = stdout ?? out
        if stderrInLines {
            process.standardError = out
        } else if let stderr {
            guard FileManager.default.createFile(atPath: stderr, contents: nil), let file = FileHandle(forWritingAtPath: stderr) else {
                throw CocoaError(.fileWriteUnknown)
            }
            process.standardError = file
        } else {
            process.standardError = FileHandle.nullDevice
        }
        try process.run()
    }

    /// The next line of output (blocking until it comes); nil at EOF.
    func nextLine() -> String? {
        while true {
            if let nl = buffer.firstIndex(of: "\n") {
                let l = String(buffer[..<nl])
                buffer.removeSubrange(...nl)
                lines.append(l)
                return l
            }
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { return nil }
            buffer += String(decoding: chunk, as: UTF8.self)
        }
    }

    /// The next line that contains `text`, skipping the lines before it; nil at EOF.
    func nextLine(containing text: String) -> String? {
        while let l = nextLine() {
            if l.contains(text) { return l }
        }
        return nil
    }

    func finish() -> Int32 {
        process.waitUntilExit()
        return process.terminationStatus
    }

    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGTERM) }
        process.waitUntilExit()
    }

    /// Stops the program (with `signal`) if it still runs after `seconds`, so that a line
    /// that never comes ends the test rather than CI. Cancel the returned item when done.
    func stopAfter(seconds: Double, signal: Int32 = SIGTERM) -> DispatchWorkItem {
        let pid = process.processIdentifier
        let item = DispatchWorkItem { kill(pid, signal) }
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds, execute: item)
        return item
    }
}

final class ProgramTests: XCTestCase {
    private var relay: RelayProcess!
    private var env: [String: String] = [:]

    override func setUpWithError() throws {
        relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        for (m, file) in [("c0", "child.json"), ("g0", "guardian.json")] {
            let path = relay.dir.appendingPathComponent(file).path
            // Private, as `permission-relay member add --credentials` writes them.
            FileManager.default.createFile(
                atPath: path, contents: Data(JSON.object(["member": .string(m), "token": .string(tokens[m]!)]).text.utf8),
                attributes: [.posixPermissions: 0o600])
        }
        env = ["PERMISSION_RELAY_SOCKET": relay.socket, "PERMISSION_STATE_DIR": relay.dir.appendingPathComponent("state").path]
    }

    override func tearDown() {
        relay.crash()
        relay = nil
    }

    /// `session` nil: the program's default session.
    private func child(
        _ args: [String], session: String? = "cli", stderrInLines: Bool = false, stdout: FileHandle? = nil
    ) throws -> ProgramRun {
        try ProgramRun(
            "permission-child",
            args + ["--credentials", relay.dir.appendingPathComponent("child.json").path] + (session.map { ["--session", $0] } ?? []),
            env: env, stderrInLines: stderrInLines, stdout: stdout)
    }

    private func guardian(_ args: [String], stderr: String? = nil, stderrInLines: Bool = false) throws -> ProgramRun {
        try ProgramRun(
            "permission-guardian", args + ["--credentials", relay.dir.appendingPathComponent("guardian.json").path], env: env,
            stderr: stderr, stderrInLines: stderrInLines)
    }

    /// Ctrl-C (SIGINT) and SIGTERM end every long-running command, with the status shells
    /// give a program a signal stopped: 130 and 143.
    func testLongRunningCommandsStopOnSIGINTAndSIGTERM() throws {
        for (command, run) in [
            ("guardian watch", { try self.guardian(["watch"], stderrInLines: true) }),
            ("guardian auto", { try self.guardian(["auto", "--approve"], stderrInLines: true) }),
            ("child watch", { try self.child(["watch"], session: nil, stderrInLines: true) }),
        ] as [(String, () throws -> ProgramRun)] {
            for sig in [SIGINT, SIGTERM] {
                let p = try run()
                let giveUp = p.stopAfter(seconds: 20, signal: SIGKILL)
                defer { giveUp.cancel() }
                XCTAssertNotNil(p.nextLine(containing: "(Ctrl-C to stop)"), command)
                kill(p.process.processIdentifier, sig)
                XCTAssertEqual(p.finish(), 128 + sig, "\(command), signal \(sig)")
                XCTAssertEqual(p.process.terminationReason, .exit, "\(command), signal \(sig): ended by its handler")
            }
        }
    }

    /// Run under nohup (SIGHUP ignored from the start), a long-running command outlives the
    /// hang-up of its terminal, and still stops on SIGTERM.
    func testAHangUpIgnoredFromTheStartStaysIgnored() throws {
        let before = signal(SIGHUP, SIG_IGN)  // inherited by the program started now
        let p: ProgramRun
        do {
            defer { signal(SIGHUP, before) }
            p = try child(["watch"], session: nil, stderrInLines: true)
        }
        let giveUp = p.stopAfter(seconds: 20, signal: SIGKILL)
        defer { giveUp.cancel() }
        XCTAssertNotNil(p.nextLine(containing: "(Ctrl-C to stop)"))
        kill(p.process.processIdentifier, SIGHUP)
        kill(p.process.processIdentifier, SIGTERM)
        XCTAssertEqual(p.finish(), 143, "stopped by the SIGTERM, not the SIGHUP before it")
    }

    /// An interrupted `ask --wait` says the question stays pending and exits 130 (143 for
    /// SIGTERM); running it again waits for that question instead of asking another.
    func testAnInterruptedWaitLeavesTheQuestionPendingAndAskingAgainWaitsForIt() throws {
        let ask = ["ask", "phone:+15550150", "--action", "message", "--wait"]
        for sig in [SIGINT, SIGTERM] {
            let first = try child(ask, session: nil, stderrInLines: true)
            let giveUp = first.stopAfter(seconds: 20, signal: SIGKILL)
            defer { giveUp.cancel() }
            XCTAssertNotNil(first.nextLine(containing: "waiting for"))
            kill(first.process.processIdentifier, sig)
            XCTAssertEqual(first.finish(), 128 + sig)
            let said = first.nextLine(containing: "interrupted") ?? "nothing"
            XCTAssertTrue(said.hasPrefix("permission-child: interrupted; question ") && said.contains("stays pending"), said)
            XCTAssertNil(first.nextLine(), "one line says it")
        }
        let pending = try guardian(["pending", "--json"])
        XCTAssertEqual(pending.finish(), 0)
        let id = try JSON.parse(pending.nextLine() ?? "")["questionId"]?.string ?? "none"
        XCTAssertNil(pending.nextLine(), "one question, though asked twice")

        let timedOut = try child(["ask", "+1 555 0150", "--action", "message", "--wait", "--timeout", "1"], stderrInLines: true)
        XCTAssertEqual(timedOut.finish(), 5, "still pending after --timeout")
        XCTAssertTrue(timedOut.nextLine()?.hasPrefix("question \(id), asked ") ?? false, timedOut.lines.joined())
        XCTAssertEqual(
            timedOut.nextLine(),
            "permission-child: no answer within 1 s; question \(id) stays pending (run the same command again to wait for it)")

        let again = try child(ask, stderrInLines: true)
        XCTAssertNotNil(again.nextLine(containing: "question \(id), asked "))
        XCTAssertEqual(try guardian(["answer", id, "approve"]).finish(), 0)
        XCTAssertEqual(again.finish(), 0)
        XCTAssertEqual(again.nextLine(), "approved: Approve (by g0)")

        let plain = try child(["ask", "phone:+15550151"])
        XCTAssertEqual(plain.finish(), 0)
        let repeated = try child(["ask", "phone:+15550151"])
        XCTAssertEqual(repeated.finish(), 0)
        XCTAssertTrue(repeated.nextLine()?.hasPrefix("already pending: ") ?? false, repeated.lines.joined())
        XCTAssertEqual(try child(["ask", "phone:+15550151", "--new"]).finish(), 0)
        let now = try guardian(["pending", "--json"])
        XCTAssertEqual(now.finish(), 0)
        while now.nextLine() != nil {}
        XCTAssertEqual(now.lines.count, 2, "--new asks again")
        let mine = try child(["questions", "--status", "pending", "--json"])
        XCTAssertEqual(mine.finish(), 0)
        while mine.nextLine() != nil {}
        XCTAssertEqual(mine.lines.filter { $0.contains(#""handles":["+15550151"]"#) }.count, 2, "which question is which: \(mine.lines)")
        // Both programs name a question's id the same way.
        func ids(_ lines: [String]) throws -> Set<String> {
            Set(try lines.map { try XCTUnwrap(JSON.parse($0)["questionId"]?.string, $0) })
        }
        XCTAssertEqual(try ids(mine.lines), try ids(now.lines))
    }

    /// Where notify-send offers actions, the notification of a new question has Approve and
    /// Decline buttons, and a click answers the question.
    func testANotificationsButtonAnswersTheQuestion() throws {
        let bin = relay.dir.appendingPathComponent("bin")
        try FileManager.default.createDirectory(at: bin, withIntermediateDirectories: true)
        let calls = relay.dir.appendingPathComponent("notify-send.calls").path
        // A notify-send whose user clicks the first action it is given.
        let fake = """
            #!/bin/sh
            [ "$1" = --help ] && { echo "  -A, --action=[NAME=]Text...  Specifies the actions to display to the user."; exit 0; }
            printf '%s\\n' "$*" >> \(calls)
            for a in "$@"; do case "$a" in --action=*) k="${a#--action=}"; echo "${k%%=*}"; exit 0;; esac; done
            """
        try fake.write(to: bin.appendingPathComponent("notify-send"), atomically: true, encoding: .utf8)
        chmod(bin.appendingPathComponent("notify-send").path, 0o755)
        env["PATH"] = bin.path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        env["DISPLAY"] = ":99"
        let watch = try guardian(["watch", "--json"], stderrInLines: true)
        let giveUp = watch.stopAfter(seconds: 30)
        defer { giveUp.cancel() }
        let ask = try child(["ask", "phone:+15550190", "--name", "Kim <b>Lee</b>", "--wait"])
        XCTAssertEqual(ask.finish(), 0)
        XCTAssertEqual(ask.nextLine(), "approved: Approve (by g0)")
        XCTAssertNotNil(watch.nextLine(containing: "from the notification"))
        watch.stop()
        let said = try String(contentsOfFile: calls, encoding: .utf8)
        XCTAssertTrue(said.contains("--action=approve=Approve --action=decline=Decline"), said)
        XCTAssertTrue(said.contains("Kim &lt;b&gt;Lee&lt;/b&gt;"), "what the child wrote is escaped: \(said)")
    }

    /// Limits off has a status of its own: a script can tell "allowed without asking" from an error.
    func testLimitsOffHasAStatusOfItsOwn() throws {
        XCTAssertEqual(try guardian(["limits", "c0", "off"]).finish(), 0)
        for args in [["ask", "+15550160"], ["ask", "+15550161", "--wait"]] {
            let p = try child(args)
            XCTAssertEqual(p.finish(), 4, args.joined(separator: " "))
            XCTAssertEqual(p.nextLine(), "communication limits are off for this child: the app may allow the contact without asking")
        }
    }

    /// A refused token is said once, without "still trying" first, and ends the watch.
    func testAWatchWithARefusedTokenSaysSoOnce() throws {
        let watch = try ProgramRun("permission-child", ["watch", "--member", "c0", "--token", "nope"], env: env, stderrInLines: true)
        let giveUp = watch.stopAfter(seconds: 20, signal: SIGKILL)
        defer { giveUp.cancel() }
        XCTAssertEqual(watch.finish(), 1)
        var said: [String] = []
        while let l = watch.nextLine() { said.append(l) }
        XCTAssertEqual(said.filter { $0.hasPrefix("permission-child:") }.count, 1, said.joined(separator: "\n"))
        XCTAssertTrue(said.last?.contains("the relay refused the credentials") ?? false, said.joined(separator: "\n"))
        XCTAssertFalse(said.joined().contains("still trying"), said.joined(separator: "\n"))
    }

    /// Each program and command has a durable session of its own: a guardian's `watch` and
    /// `auto` side by side never take one from the other.
    func testProgramsSideBySideHaveSessionsOfTheirOwn() throws {
        let log = relay.dir.appendingPathComponent("watch.err").path
        let watch = try guardian(["watch", "--json"], stderr: log)
        let giveUp = watch.stopAfter(seconds: 30)
        defer { giveUp.cancel() }
        let bot = try guardian(["auto", "--approve", "--count", "3", "--json"])
        for n in 0..<3 {
            let ask = try child(["ask", "+1555017\(n)", "--wait", "--json"], session: nil)
            XCTAssertEqual(ask.finish(), 0)
            let id = try JSON.parse(ask.nextLine() ?? "")["questionId"]?.string ?? "none"
            XCTAssertNotNil(watch.nextLine(containing: id))
        }
        XCTAssertEqual(bot.finish(), 0)
        watch.stop()
        XCTAssertEqual(try child(["ask", "+15550179"], session: nil).finish(), 0)  // takes the child's watch session
        let said = try String(contentsOfFile: log, encoding: .utf8)
        XCTAssertFalse(said.contains("another client opened this session"), said)
        let states = try FileManager.default.contentsOfDirectory(atPath: env["PERMISSION_STATE_DIR"]!).sorted()
        XCTAssertTrue(states.contains { $0.hasPrefix("g0.g0-") && $0.hasSuffix("-permission-guardian-watch.state") }, "\(states)")
        XCTAssertTrue(states.contains { $0.hasPrefix("g0.g0-") && $0.hasSuffix("-permission-guardian-auto.state") }, "\(states)")
        XCTAssertTrue(states.contains { $0.hasPrefix("c0.c0-") && $0.hasSuffix("-permission-child.state") }, "\(states)")
    }

    func testAWatchWhoseTokenIsRotatedSaysSoAndEnds() throws {
        let log = relay.dir.appendingPathComponent("watch.err").path
        let watch = try guardian(["watch", "--json"], stderr: log)
        let giveUp = watch.stopAfter(seconds: 30)
        defer { giveUp.cancel() }
        let ask = try child(["ask", "+15550128", "--json"])
        XCTAssertEqual(ask.finish(), 0)
        XCTAssertNotNil(watch.nextLine(), "the watch is connected")
        _ = try relay.admin().request(["type": "rotateToken", "member": "g0"])
        XCTAssertEqual(watch.finish(), 1)
        let said = try String(contentsOfFile: log, encoding: .utf8)
        XCTAssertTrue(
            said.contains(
                "permission-guardian: the relay refused the credentials: unknown member or wrong token (the member's token was"
                    + " rotated: use the new one)\n"), said)
    }

    func testAWatchSaysWhenTheRelayIsGoneAndWhenItIsBack() throws {
        let watch = try ProgramRun(
            "permission-guardian", ["watch", "--json", "--credentials", relay.dir.appendingPathComponent("guardian.json").path],
            env: env, stderrInLines: true)
        let giveUp = watch.stopAfter(seconds: 40)
        defer { giveUp.cancel() }
        for round in 0..<2 {
            let ask = try child(["ask", "+1555014\(round)", "--json"])
            XCTAssertEqual(ask.finish(), 0)
            let id = try JSON.parse(ask.nextLine() ?? "")["questionId"]?.string ?? "?"
            XCTAssertNotNil(watch.nextLine(containing: id), "round \(round): the watch is connected")
            guard round == 0 else { break }
            relay.crash()
            let gone = watch.nextLine(containing: "permission-guardian: ")
            // Why depends on how far the first attempt got while the relay died (connect refused, or no welcome).
            XCTAssertTrue(gone?.hasPrefix("permission-guardian: the relay is not available: ") ?? false, gone ?? "EOF")
            XCTAssertTrue(gone?.hasSuffix("still trying") ?? false, gone ?? "EOF")
            try relay.start()
            XCTAssertEqual(watch.nextLine(containing: "permission-guardian: "), "permission-guardian: connected to the relay again")
        }
        watch.stop()
    }

    /// Started while the relay is down, a watch says it is not available, then that it is
    /// connected: not "again", as it never was.
    func testAWatchStartedBeforeTheRelaySaysWhenItIsConnected() throws {
        relay.crash()
        let watch = try ProgramRun(
            "permission-guardian", ["watch", "--json", "--credentials", relay.dir.appendingPathComponent("guardian.json").path],
            env: env, stderrInLines: true)
        let giveUp = watch.stopAfter(seconds: 30)
        defer { giveUp.cancel() }
        let gone = watch.nextLine(containing: "permission-guardian: ")
        XCTAssertTrue(gone?.hasSuffix("still trying") ?? false, gone ?? "EOF")
        try relay.start()
        XCTAssertEqual(watch.nextLine(containing: "permission-guardian: "), "permission-guardian: connected to the relay")
        watch.stop()
    }

    func testAsksBesideTheChildsWatchLeaveItsSessionAlone() throws {
        let log = relay.dir.appendingPathComponent("child-watch.err").path
        let watch = try ProgramRun(
            "permission-child",
            ["watch", "--json", "--credentials", relay.dir.appendingPathComponent("child.json").path, "--session", "cli"],
            env: env, stderr: log)
        let giveUp = watch.stopAfter(seconds: 30)
        defer { giveUp.cancel() }
        // The watch is surely connected for the second and third (it printed the first's response):
        // two asks that took its session would make it say so.
        for number in ["+15550131", "+15550132", "+15550133"] {
            let ask = try child(["ask", number, "--json"])  // the same session name as the watch
            XCTAssertEqual(ask.finish(), 0)
            let id = try JSON.parse(ask.nextLine() ?? "")["questionId"]?.string ?? ""
            XCTAssertEqual(try guardian(["answer", id, "approve"]).finish(), 0)
            XCTAssertEqual(try JSON.parse(watch.nextLine() ?? "")["questionId"]?.string, id)
        }
        watch.stop()
        let said = try String(contentsOfFile: log, encoding: .utf8)
        XCTAssertFalse(said.contains("another client opened this session"), said)
    }

    func testCommandsBesideAWatchLeaveItsSessionAlone() throws {
        let log = relay.dir.appendingPathComponent("watch.err").path
        let watch = try guardian(["watch", "--json"], stderr: log)
        let giveUp = watch.stopAfter(seconds: 30)
        defer { giveUp.cancel() }
        let ask = try child(["ask", "+15550126", "--json"])
        XCTAssertEqual(ask.finish(), 0)
        let id = try JSON.parse(ask.nextLine() ?? "")["questionId"]?.string ?? ""
        XCTAssertEqual(try JSON.parse(watch.nextLine() ?? "")["questionId"]?.string, id)
        // Each of these says hello as the same member, with the same default session name.
        for args in [["pending"], ["history"], ["answer", id, "approve"], ["known", "add", "c0", "+15550127"]] {
            XCTAssertEqual(try guardian(args).finish(), 0, args.joined(separator: " "))
        }
        let closed = try JSON.parse(watch.nextLine() ?? "")
        XCTAssertEqual(closed["type"]?.string, "questionClosed")
        XCTAssertEqual(closed["questionId"]?.string, id)
        XCTAssertEqual(closed["by"]?.string, "g0")
        XCTAssertEqual(closed["choice"]?.string, "approve", "what the guardian decided")
        watch.stop()
        let said = try String(contentsOfFile: log, encoding: .utf8)
        XCTAssertFalse(said.contains("another client opened this session"), said)
    }

    /// An --id already asked is a resend, whatever else is given: the child is told that the
    /// first version stands.
    func testAskingAnIdAgainSaysTheFirstVersionStands() throws {
        let id = UUID().uuidString
        let first = try child(["ask", "phone:+15553000", "--id", id], stderrInLines: true)
        XCTAssertEqual(first.finish(), 0)
        XCTAssertEqual(first.nextLine(), "asked \(id) (pending, attempt 1)")
        let again = try child(["ask", "phone:+15553001", "--id", id, "--name", "Someone Else"], stderrInLines: true)
        XCTAssertEqual(again.finish(), 0)
        let said = [again.nextLine(), again.nextLine()].compactMap { $0 }
        XCTAssertTrue(
            said.contains("permission-child: question \(id) was asked before about +15553000 and is pending: its first version stands"),
            "\(said)")
    }

    /// A question that expired while the relay was stopped is told as one seen expiring:
    /// with its default choice.
    func testAWaitingAskToldOfAnExpiryAfterARestartNamesTheDefaultChoice() throws {
        let expiring = try child(["ask", "custom:kim43", "--expires", "2s", "--wait"])
        let incoming = try guardian(["watch", "--json"])
        XCTAssertNotNil(incoming.nextLine(), "asked")
        incoming.stop()
        XCTAssertEqual(relay.terminate(), 0)
        usleep(2_500_000)  // past its expiry, with no relay to expire it: time is what is waited for
        try relay.start()
        XCTAssertEqual(expiring.finish(), 3)
        XCTAssertEqual(expiring.nextLine(), "expired; default choice: Decline")
    }

    func testAskWaitExitCodesTellTheOutcome() throws {
        let approved = try child(["ask", "phone:+15550100", "--name", "Kim Lee", "--action", "message", "--wait"])
        let bot = try guardian(["auto", "--approve", "--count", "1"])
        XCTAssertEqual(bot.finish(), 0)
        XCTAssertEqual(approved.finish(), 0)
        XCTAssertEqual(approved.nextLine(), "approved: Approve (by g0)")

        let denied = try child(["ask", "kim@example.org", "--wait", "--json"])
        XCTAssertEqual(try guardian(["auto", "--decline", "--count", "1"]).finish(), 0)
        XCTAssertEqual(denied.finish(), 2)
        XCTAssertEqual(try JSON.parse(denied.nextLine() ?? "")["outcome"]?.string, "denied")

        let expired = try child(["ask", "custom:kim42", "--expires", "1s", "--wait"])
        XCTAssertEqual(expired.finish(), 3)
        XCTAssertEqual(expired.nextLine(), "expired; default choice: Decline")

        let id = UUID().uuidString
        let cancelled = try child(["ask-update", "--description", "v2 adds chat", "--id", id, "--wait", "--json"])
        var incoming = try guardian(["watch", "--json"])
        XCTAssertEqual(try JSON.parse(incoming.nextLine() ?? "")["questionId"]?.string, id)
        incoming.stop()
        XCTAssertEqual(try child(["cancel", id], session: "other").finish(), 0)
        XCTAssertEqual(cancelled.finish(), 3)
        XCTAssertEqual(try JSON.parse(cancelled.nextLine() ?? "")["outcome"]?.string, "cancelled")

        let custom = try child(["ask", "+15550101", "--choice", "hour:For an hour:approval:3600", "--choice", "no:No:denial", "--wait"])
        incoming = try guardian(["watch", "--json"])
        let q = try JSON.parse(incoming.nextLine() ?? "")
        XCTAssertEqual(q["choices"], ["hour", "no"])
        incoming.stop()
        XCTAssertEqual(try guardian(["answer", q["questionId"]!.string!, "hour"]).finish(), 0)
        XCTAssertEqual(custom.finish(), 0)
        XCTAssertEqual(custom.nextLine(), "approved: For an hour (by g0)")
        let known = try child(["known", "+1 555 0101", "+15550199"])
        XCTAssertEqual(known.finish(), 0)
        let (first, second) = (known.nextLine() ?? "", known.nextLine())
        XCTAssertEqual(second, "+15550199: not known")
        // Known for the hour the guardian chose, from the answer on, to the millisecond.
        let prefix = "+1 555 0101: known until "
        XCTAssertTrue(first.hasPrefix(prefix), first)
        let printed = String(first.dropFirst(prefix.count))
        let until = try XCTUnwrap(Timestamp(rfc3339: printed), first)
        XCTAssertEqual(Double(until.milliseconds) / 1000 - Date().timeIntervalSince1970, 3600, accuracy: 60)
        let credentials = try JSON.parse(String(contentsOf: relay.dir.appendingPathComponent("child.json"), encoding: .utf8))
        let c = try relay.connect()
        _ = try c.hello("c0", credentials["token"]?.string ?? "")
        let held = try c.request(["type": "knownHandles", "handles": [.object(["value": "+1 555 0101", "kind": "phoneNumber"])]])
        XCTAssertEqual(held["timed"]?.array?.first?["until"]?.string, printed, "as the relay holds it")
    }

    /// Asked again while pending, an app update is the same question, as a contact is; the
    /// list names the update.
    func testAskingAboutTheSameUpdateAgainFindsThePendingQuestion() throws {
        let first = try child(["ask-update", "--description", "v3 adds stories", "--json"])
        XCTAssertEqual(first.finish(), 0)
        let id = try XCTUnwrap(try JSON.parse(first.nextLine() ?? "")["questionId"]?.string)
        let again = try child(["ask-update", "--description", "v3 adds stories"])
        XCTAssertEqual(again.finish(), 0)
        let said = again.nextLine() ?? ""
        XCTAssertTrue(said.hasPrefix("already pending: \(id)") && said.contains("about the same update"), said)
        let other = try child(["ask-update", "--description", "v4 adds calls", "--json"])
        XCTAssertEqual(other.finish(), 0)
        XCTAssertNotEqual(try JSON.parse(other.nextLine() ?? "")["questionId"]?.string, id, "another update is another question")
        let listed = try child(["questions", "--status", "pending"])
        XCTAssertEqual(listed.finish(), 0)
        var lines: [String] = []
        while let l = listed.nextLine() { lines.append(l) }
        XCTAssertEqual(lines.count, 2, "\(lines)")
        XCTAssertTrue(lines.contains { $0.hasPrefix(id) && $0.hasSuffix("update: v3 adds stories") }, "\(lines)")
    }

    func testResponsesFanOutToTwoChildProcesses() throws {
        let tablet = try child(["watch", "--json"], session: "tablet")
        let phone = try child(["watch", "--json"], session: "phone")
        let ask = try child(["ask", "+15550123", "--json"], session: "asker")
        XCTAssertEqual(ask.finish(), 0)
        let id = try JSON.parse(ask.nextLine() ?? "")["questionId"]?.string
        XCTAssertEqual(try guardian(["answer", id ?? "", "approve"]).finish(), 0)
        for p in [tablet, phone] {
            let r = try JSON.parse(p.nextLine() ?? "")
            XCTAssertEqual(r["questionId"]?.string, id)
            XCTAssertEqual(r["answer"]?.string, "approval")
            p.stop()
        }
    }

    func testChildRestartedBeforeDeliveryGetsTheResponseExactlyOnce() throws {
        let ask = try child(["ask", "+15550124", "--json"], session: "app")
        XCTAssertEqual(ask.finish(), 0)
        let id = try JSON.parse(ask.nextLine() ?? "")["questionId"]?.string ?? ""
        XCTAssertEqual(try guardian(["answer", id, "decline"]).finish(), 0)

        let first = try child(["watch", "--json"], session: "app")
        XCTAssertEqual(try JSON.parse(first.nextLine() ?? "")["questionId"]?.string, id)
        first.stop()

        let second = try child(["watch", "--json"], session: "app")
        let marker = try child(["ask", "+15550125", "--json"], session: "asker")
        XCTAssertEqual(marker.finish(), 0)
        let markerID = try JSON.parse(marker.nextLine() ?? "")["questionId"]?.string ?? ""
        XCTAssertEqual(try guardian(["answer", markerID, "approve"]).finish(), 0)
        XCTAssertEqual(try JSON.parse(second.nextLine() ?? "")["questionId"]?.string, markerID, "the first response is not repeated")
        second.stop()
    }

    /// Credentials others may read are used, with a warning that says how to make them private.
    func testCredentialsOthersMayReadAreUsedWithAWarning() throws {
        let file = relay.dir.appendingPathComponent("child.json").path
        let quiet = try child(["limits"], stderrInLines: true)
        XCTAssertEqual(quiet.finish(), 0)
        XCTAssertEqual(quiet.nextLine(), "communication limits: on")
        XCTAssertNil(quiet.nextLine(), "no warning for a private file")
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: file)
        let warned = try child(["limits"], stderrInLines: true)
        XCTAssertEqual(warned.finish(), 0)
        var lines: [String] = []
        while let l = warned.nextLine() { lines.append(l) }
        XCTAssertEqual(
            lines.first,
            "permission-child: warning: \(file) can be read by other users, who could act as c0 with its token; make it private: chmod 600 \(file)"
        )
        XCTAssertEqual(lines.last, "communication limits: on")
    }

    /// A watch whose output cannot be written (a full disk) stops, saying why, and the
    /// response it could not print is not taken as processed: the next watch prints it.
    func testAWatchThatCannotWriteStopsAndLeavesTheResponseToTheNext() throws {
        let ask = try child(["ask", "+15550126", "--json"], session: "app")
        XCTAssertEqual(ask.finish(), 0)
        let id = try JSON.parse(ask.nextLine() ?? "")["questionId"]?.string ?? ""
        XCTAssertEqual(try guardian(["answer", id, "approve"]).finish(), 0)

        let full = try child(
            ["watch", "--json"], session: "app", stderrInLines: true, stdout: try XCTUnwrap(FileHandle(forWritingAtPath: "/dev/full")))
        let giveUp = full.stopAfter(seconds: 20, signal: SIGKILL)
        defer { giveUp.cancel() }
        XCTAssertEqual(full.nextLine(), "permission-child: cannot write the output: No space left on device")
        XCTAssertEqual(full.finish(), 1)

        let next = try child(["watch", "--json"], session: "app")
        let stray = next.stopAfter(seconds: 20)
        defer { stray.cancel() }
        XCTAssertEqual(try JSON.parse(next.nextLine() ?? "")["questionId"]?.string, id)
        next.stop()
    }

    func testHelpUsageAndErrors() throws {
        func help(_ program: String, _ args: [String]) throws -> String {
            let p = try ProgramRun(program, args, env: [:])
            XCTAssertEqual(p.finish(), 0)
            var text = ""
            while let l = p.nextLine() { text += l + "\n" }
            return text
        }
        for program in ["permission-child", "permission-guardian"] {
            let text = try help(program, ["--help"])
            XCTAssertTrue(text.contains("EXAMPLES:") && text.contains("EXIT STATUS:"), program)
        }
        // A command's help is that command's: its options, the shared ones, its examples.
        for (program, args, usage, own, others) in [
            ("permission-child", ["ask", "--help"], "permission-child ask HANDLE... [options]", "--choice", "ask-update"),
            ("permission-guardian", ["help", "history"], "permission-guardian history [--child C]", "--limit 20", "auto --approve"),
        ] {
            let text = try help(program, args)
            XCTAssertTrue(text.hasPrefix("USAGE: \(usage)"), text)
            XCTAssertTrue(text.contains(own) && text.contains("--credentials FILE") && text.contains("EXAMPLES:"), text)
            XCTAssertFalse(text.contains(others), text)
        }
        XCTAssertEqual(try ProgramRun("permission-child", ["fly"], env: [:]).finish(), 64)
        let nowhere = NSTemporaryDirectory() + "hubless-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: nowhere) }
        for hub in ["nats://127.0.0.1:99999", "http://hub.home.arpa:4222", "nats://:4222"] {
            let serve = try ProgramRun(
                "permission-relay", ["serve", "--socket", nowhere + "/s", "--data", nowhere + "/data", "--hub", hub], env: [:],
                stderrInLines: true)
            XCTAssertEqual(serve.finish(), 64, hub)
            XCTAssertTrue(serve.nextLine()?.contains("--hub must be a NATS address") ?? false, hub)
        }
        for program in ["permission-child", "permission-guardian", "permission-harness", "permission-relay"] {
            let nothing = try ProgramRun(program, [], env: [:], stderrInLines: true)
            XCTAssertEqual(nothing.finish(), 64, program)
            while nothing.nextLine() != nil {}
            XCTAssertEqual(nothing.lines.count, 1, "one line, as for any usage error: \(nothing.lines)")
            XCTAssertTrue(nothing.lines.first?.hasPrefix("\(program): no command given") ?? false, "\(nothing.lines)")
            XCTAssertTrue(nothing.lines.first?.hasSuffix("(see `\(program) --help`)") ?? false, "\(nothing.lines)")
        }
        // The view acts on keys: asked for by name, it too needs a terminal, never piped input.
        let piped = try guardian(["view"], stderrInLines: true)
        XCTAssertEqual(piped.finish(), 64)
        XCTAssertEqual(piped.nextLine(), "permission-guardian: the view needs a terminal (see `permission-guardian --help`)")
        let bare = try ProgramRun(
            "permission-guardian", ["answer"], env: ["PERMISSION_MEMBER": "", "PERMISSION_CREDENTIALS": ""], stderrInLines: true)
        XCTAssertEqual(bare.finish(), 64)
        XCTAssertTrue(bare.nextLine()?.contains("expected ID CHOICE, got nothing") ?? false, "what is missing first, then who")
        let bareAsk = try ProgramRun(
            "permission-child", ["ask"], env: ["PERMISSION_MEMBER": "", "PERMISSION_CREDENTIALS": ""], stderrInLines: true)
        XCTAssertEqual(bareAsk.finish(), 64)
        XCTAssertTrue(bareAsk.nextLine()?.contains("ask needs at least one HANDLE") ?? false, "what is missing first, then who")
        let action = try child(["ask", "+15550177", "--action", "mesage"], stderrInLines: true)
        XCTAssertEqual(action.finish(), 64)
        XCTAssertTrue(
            action.nextLine()?.contains("unknown --action mesage (did you mean message?): use message, audioCall,") ?? false,
            action.lines.joined())
        XCTAssertEqual(
            try ProgramRun(
                "permission-guardian", ["pending"], env: ["PERMISSION_MEMBER": "", "PERMISSION_TOKEN": "", "PERMISSION_CREDENTIALS": ""]
            ).finish(), 64)
        XCTAssertEqual(try child(["ask", "+1555", "--choice", "broken"]).finish(), 64)
        XCTAssertEqual(try child(["ask", "+15550177", "--timeout", "1"]).finish(), 64, "--timeout is --wait's: never ignored")
        XCTAssertEqual(try child(["ask", "+15550177", "--wait", "--timeout", "soon"]).finish(), 64)
        XCTAssertEqual(try child(["watch", "--timeout", "3"]).finish(), 64, "not an option of watch")
        XCTAssertEqual(try child(["questions", "--status", "bogus"]).finish(), 64)
        XCTAssertEqual(try child(["limits", "--socket", ""]).finish(), 64, "an empty socket path")
        XCTAssertEqual(try child(["known", "+15550177", "--status", "pending"]).finish(), 64, "not an option of known")
        let names = try child(["ask", "+15550177", "+15550178", "--name", "A", "--name", "B", "--name", "C"], stderrInLines: true)
        XCTAssertEqual(names.finish(), 64, "a name would be dropped")
        XCTAssertTrue(names.nextLine()?.contains("3 names (--name) for 2 handles") ?? false)
        // Another role's credentials: said in the user's terms, not the request's.
        let swapped = try ProgramRun(
            "permission-child", ["ask", "+15550183", "--credentials", relay.dir.appendingPathComponent("guardian.json").path], env: env,
            stderrInLines: true)
        XCTAssertEqual(swapped.finish(), 1)
        XCTAssertEqual(
            swapped.nextLine(),
            "permission-child: g0 is a guardian: this command is a child's (a guardian uses permission-guardian; are these the credentials you meant?)"
        )
        // Nothing given is ignored: an argument a command takes none of, an option given twice.
        XCTAssertEqual(try child(["limits", "extra"]).finish(), 64)
        let twice = try guardian(["pending", "--child", "c0", "--child", "c9"], stderrInLines: true)
        XCTAssertEqual(twice.finish(), 64)
        XCTAssertTrue(twice.nextLine()?.contains("--child is given twice: give it once") ?? false, twice.lines.joined())
        // An empty --name leaves its handle unnamed; another empty value is a usage error.
        XCTAssertEqual(try child(["ask", "+15550180", "+15550181", "--name", "", "--name", "Bob Smith"]).finish(), 0)
        XCTAssertEqual(try child(["ask", "+15550182", "--id", ""]).finish(), 64)
        // A time too long for the clock is a usage error before anything is asked.
        let century = try child(["ask", "+15550179", "--wait", "--timeout", "1e19"], stderrInLines: true)
        XCTAssertEqual(century.finish(), 64)
        XCTAssertEqual(
            century.nextLine(),
            #"permission-child: --timeout must be a number of seconds from 0 to 3153600000, not "1e19" (see `permission-child --help`)"#)
        let past = try child(["ask", "+15550177", "--expires", "0s"], stderrInLines: true)
        XCTAssertEqual(past.finish(), 64)
        XCTAssertTrue(past.nextLine()?.contains("--expires takes a time to come") ?? false)
        // Options may come before the command too.
        let credentials = ["--credentials", relay.dir.appendingPathComponent("child.json").path]
        XCTAssertEqual(try ProgramRun("permission-child", credentials + ["limits"], env: env).finish(), 0)
        let before = ["--credentials", relay.dir.appendingPathComponent("guardian.json").path, "--json", "pending"]
        XCTAssertEqual(try ProgramRun("permission-guardian", before, env: env).finish(), 0)
        // A usage error is one line: the problem, and where help is.
        let fax = try child(["ask", "fax:12345"], stderrInLines: true)
        XCTAssertEqual(fax.finish(), 64, "an unknown kind of handle")
        XCTAssertEqual(
            fax.nextLine(),
            #"permission-child: unknown kind of handle "fax:" in "fax:12345": write phone:…, email:… or custom:… (custom:fax:12345 for an app's own id) (see `permission-child --help`)"#
        )
        XCTAssertNil(fax.nextLine())
        XCTAssertEqual(try child(["watch"], session: "my tablet").finish(), 64, "a session name the relay would refuse")
        let wrong = try ProgramRun("permission-guardian", ["pending", "--member", "g0", "--token", "nope"], env: env)
        XCTAssertEqual(wrong.finish(), 1)
        // A watch that could not keep its place says so at once, instead of watching without it.
        let aFile = relay.dir.appendingPathComponent("child.json").path
        for (stateDir, why) in [(aFile + "/state", ": \(aFile) is a file, not a directory"), (aFile, ": it is a file, not a directory")] {
            let err = relay.dir.appendingPathComponent("state-dir.err").path
            let lost = try guardian(["watch", "--state-dir", stateDir], stderr: err)
            let giveUp = lost.stopAfter(seconds: 30)
            XCTAssertEqual(lost.finish(), 1)
            giveUp.cancel()
            let said = try String(contentsOfFile: err, encoding: .utf8)
            XCTAssertTrue(said.contains("cannot keep this client's place in the relay's events in \(stateDir)\(why)"), said)
        }
        relay.crash()
        var down = env
        down["PERMISSION_RELAY_SOCKET"] = relay.socket
        let downErr = relay.dir.appendingPathComponent("down.err").path
        let p = try ProgramRun(
            "permission-child", ["limits", "--credentials", relay.dir.appendingPathComponent("child.json").path], env: down,
            stderr: downErr)
        XCTAssertEqual(p.finish(), 1)
        // It says why the relay could not be reached, not only that it could not.
        let why = try String(contentsOfFile: downErr, encoding: .utf8)
        XCTAssertTrue(why.hasPrefix("permission-child: the relay is not available: cannot connect to \(relay.socket)"), why)
        XCTAssertTrue(why.contains("is `permission-relay serve` running"), why)
    }

    func testWhatAChildWritesCannotDriveTheGuardiansTerminal() throws {
        // A clear screen and a change of title, then text reordered to read backwards.
        let description = "Chat \u{1B}[2J\u{1B}]0;pwned\u{07}with \u{202E}Kim"
        let choices = ["--choice", "ok\u{1B}[8m:Fine:approval", "--choice", "no:No:denial"]
        XCTAssertEqual(try child(["ask-update", "--description", description] + choices).finish(), 0)
        let pending = try guardian(["pending"])
        XCTAssertEqual(pending.finish(), 0)
        let text = pending.nextLine() ?? ""
        XCTAssertTrue(text.contains("Chat \u{FFFD}[2J\u{FFFD}]0;pwned\u{FFFD}with \u{FFFD}Kim"), text)
        XCTAssertTrue(text.contains("[ok\u{FFFD}[8m|no]"), text)
        XCTAssertFalse(text.unicodeScalars.contains { $0.value < 0x20 || $0 == "\u{202E}" }, text)
    }

    func testAQuestionReadsAsWhatTheChildAsksToDo() throws {
        XCTAssertEqual(try child(["ask", "phone:+15550190", "--name", "Kim Lee", "--action", "chat"]).finish(), 0)
        XCTAssertEqual(try child(["ask", "+15550191", "--action", "message", "--action", "call"]).finish(), 0)
        let pending = try guardian(["pending"])
        XCTAssertEqual(pending.finish(), 0)
        var text = ""
        while let l = pending.nextLine() { text += l + "\n" }
        XCTAssertTrue(text.contains("c0 asks to chat with Kim Lee (+15550190)"), text)
        XCTAssertTrue(text.contains("c0 asks to communicate with +15550191: call, message"), text)
    }

    func testGuardianTerminalViewShowsAQuestionAndApprovesIt() throws {
        let ask = try child(["ask", "phone:+15550126", "--name", "Kim Lee", "--action", "videoCall", "--expires", "10m", "--wait"])
        guard let session = terminal("pg", 120, 30, viewCommand) else { return }
        XCTAssertTrue(waitForScreen(session) { $0.contains("c0 asks to video-call Kim Lee (+15550126)") && $0.contains("1 Approve") })
        _ = tmux(["send-keys", "-t", session, "a"])
        XCTAssertEqual(ask.finish(), 0)
        XCTAssertEqual(ask.nextLine(), "approved: Approve (by g0)")
        XCTAssertTrue(waitForScreen(session) { $0.contains("0 pending") })
    }

    /// On a narrow terminal the selected question is shown whole, wrapped: who, which
    /// handle, every action; the keys say which choice `a` and `d` give.
    func testGuardianTerminalViewShowsTheSelectedQuestionWholeOnANarrowTerminal() throws {
        let long = ["ask", "phone:+15550177", "--name", "Alexandra Konstantinopoulou-Vanderbilt"]
        XCTAssertEqual(try child(long + ["--action", "message", "--action", "videoCall", "--action", "follow"]).finish(), 0)
        let choices = ["--choice", "no:Not now:denial", "--choice", "week:For a week:approval", "--choice", "ever:Always:approval"]
        XCTAssertEqual(try child(["ask", "+15550178"] + choices).finish(), 0)
        guard let session = terminal("pgw", 60, 24, viewCommand) else { return }
        XCTAssertTrue(
            waitForScreen(session) { screen in
                screen.contains(
                    "› c0 asks to communicate with Alexandra\n  Konstantinopoulou-Vanderbilt (+15550177): follow,\n  message, videoCall\n")
                    && screen.contains("a Approve · d Decline")
            })
        _ = tmux(["send-keys", "-t", session, "j"])
        XCTAssertTrue(waitForScreen(session) { $0.contains("a For a week · d Not now · 1-9 choice") })
    }

    /// A view that cannot reach the relay says so, with the socket, never "No questions waiting".
    func testGuardianTerminalViewSaysWhyItCannotListTheQuestions() throws {
        let nowhere = relay.dir.appendingPathComponent("nowhere.sock").path
        let command = viewCommand.replacingOccurrences(
            of: "PERMISSION_RELAY_SOCKET=\(relay.socket)", with: "PERMISSION_RELAY_SOCKET=\(nowhere)")
        guard let session = terminal("pgn", 200, 20, command) else { return }
        let said =
            "could not read the pending questions: the relay is not available: cannot connect to \(nowhere): there is no socket there"
        XCTAssertTrue(
            waitForScreen(session, seconds: 20) {
                $0.contains(said) && $0.contains("(none shown: see below)") && !$0.contains("No questions")
            })
        // The relay there after all (the same socket, linked): the view reads again, and says no more why it could not.
        XCTAssertEqual(link(relay.socket, nowhere), 0)
        XCTAssertTrue(waitForScreen(session, seconds: 20) { $0.contains("No questions waiting.") && !$0.contains(said) })
    }

    func testGuardianTerminalViewSaysWhenNothingIsWaiting() throws {
        guard let session = terminal("pge", 100, 20, viewCommand) else { return }
        XCTAssertTrue(waitForScreen(session) { $0.contains("No questions waiting.") && !$0.contains("loading") })
    }

    /// The view has a screen of its own: after `q`, the terminal shows what it did before.
    func testGuardianTerminalViewGivesTheScreenBackAsItWas() throws {
        let command = "sh -c 'echo before the view; \(viewCommand); echo \"exited $?\"; sleep 60'"
        guard let session = terminal("pgb", 100, 20, command) else { return }
        XCTAssertTrue(waitForScreen(session) { $0.contains("No questions waiting.") && !$0.contains("before the view") })
        _ = tmux(["send-keys", "-t", session, "q"])
        XCTAssertTrue(waitForScreen(session) { $0.hasPrefix("before the view\nexited 0\n") })
    }

    /// SIGTERM ends the view with 143 and gives the terminal back as it was (echo, lines).
    func testGuardianTerminalViewStopsOnSIGTERMAndRestoresTheTerminal() throws {
        let view = viewCommand
        let command =
            "sh -c '\(view); echo \"exited $?\"; stty -a | tr \" \" \"\\n\" | grep -x -e -echo -e -icanon -e echo -e icanon; sleep 60'"
        guard let session = terminal("pgt", 100, 20, command) else { return }
        XCTAssertTrue(waitForScreen(session) { $0.contains("No questions waiting.") })
        let shell = spawn("/usr/bin/tmux", ["display", "-p", "-t", session, "#{pane_pid}"]).output.trimmingCharacters(
            in: .whitespacesAndNewlines)
        let guardianPID = spawn("/usr/bin/pgrep", ["-P", shell]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertNotNil(Int32(guardianPID), "the view runs under the shell (\(shell))")
        kill(Int32(guardianPID) ?? 0, SIGTERM)
        XCTAssertTrue(waitForScreen(session) { $0.contains("exited 143") && $0.contains("\nicanon") && $0.contains("\necho") })

        // Ctrl-C, a key in the view's raw terminal, ends it as SIGINT would: 130.
        guard let again = terminal("pgtc", 100, 20, command) else { return }
        XCTAssertTrue(waitForScreen(again) { $0.contains("No questions waiting.") })
        _ = tmux(["send-keys", "-t", again, "C-c"])
        XCTAssertTrue(waitForScreen(again) { $0.contains("exited 130") && $0.contains("\nicanon") })
    }

    /// Refused credentials end the view with 1, said in full under it, as they end `watch`.
    func testGuardianTerminalViewEndsWithOneWhenTheCredentialsAreRefused() throws {
        let view =
            "PERMISSION_RELAY_SOCKET=\(relay.socket) PERMISSION_STATE_DIR=\(env["PERMISSION_STATE_DIR"]!) \(productsDirectory.appendingPathComponent("permission-guardian").path) --member g0 --token nope"
        let command =
            "sh -c '\(view); echo \"exited $?\"; stty -a | tr \" \" \"\\n\" | grep -x -e -echo -e -icanon -e echo -e icanon; sleep 60'"
        guard let session = terminal("pgr", 200, 20, command) else { return }
        XCTAssertTrue(
            waitForScreen(session) { screen in
                let unwrapped = screen.replacingOccurrences(of: "\n", with: "")
                return screen.contains("exited 1\n") && screen.contains("\nicanon") && screen.contains("\necho")
                    && unwrapped.contains("permission-guardian: the relay refused the credentials")
                    && unwrapped.contains("permission-relay token rotate MEMBER")
            })
    }

    func testGuardianTerminalViewFitsTheTerminalAndScrollsToTheSelection() throws {
        for n in 0..<6 { XCTAssertEqual(try child(["ask", "+155501\(40 + n)"]).finish(), 0) }
        // 14 rows: room for three questions, two lines each, with the header and the keys.
        guard let session = terminal("pgs", 64, 14, viewCommand) else { return }
        XCTAssertTrue(
            waitForScreen(session) { screen in
                screen.hasPrefix("Permission requests — 6 pending") && screen.contains("› c0 asks to communicate with +15550140")
                    && screen.contains("↓ 3 more") && !screen.contains("+15550143") && screen.contains("q quit")
            })
        for _ in 0..<5 { _ = tmux(["send-keys", "-t", session, "j"]) }
        XCTAssertTrue(
            waitForScreen(session) { screen in
                screen.hasPrefix("Permission requests — 6 pending") && screen.contains("↑ 3 more")
                    && screen.contains("› c0 asks to communicate with +15550145") && !screen.contains("+15550142")
            })
    }

    /// The guardian's view, as a shell in tmux runs it.
    private var viewCommand: String {
        "PERMISSION_RELAY_SOCKET=\(relay.socket) PERMISSION_STATE_DIR=\(env["PERMISSION_STATE_DIR"]!) \(productsDirectory.appendingPathComponent("permission-guardian").path) --credentials \(relay.dir.appendingPathComponent("guardian.json").path)"
    }

    @discardableResult
    private func tmux(_ args: [String]) -> Int32 { spawn("/usr/bin/tmux", args, capture: false).status }

    /// A tmux session of its own, `width` × `height`, running `command` until the test ends;
    /// nil, the test failed, without tmux.
    private func terminal(_ name: String, _ width: Int, _ height: Int, _ command: String) -> String? {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/tmux") else {
            XCTFail("tmux is needed for this test (`apt-get install tmux`; .ci/run installs it)")
            return nil
        }
        let session = "\(name)\(getpid())"
        XCTAssertEqual(tmux(["new-session", "-d", "-s", session, "-x", "\(width)", "-y", "\(height)", command]), 0)
        addTeardownBlock { [self] in _ = tmux(["kill-session", "-t", session]) }
        return session
    }

    /// Reads the tmux screen until `ok` holds (a terminal offers no event to wait on), for at most `seconds`.
    private func waitForScreen(_ session: String, seconds: Double = 10, _ ok: (String) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        var last = ""
        while Date() < deadline {
            last = spawn("/usr/bin/tmux", ["capture-pane", "-p", "-t", session]).output
            if ok(last) { return true }
            usleep(50_000)
        }
        XCTFail("screen never matched; last screen:\n\(last)")
        return false
    }
}

/// Runs a short command and returns its status and (with `capture`) its standard output.
/// Without `capture` its output goes to /dev/null: a command that leaves a daemon behind
/// (`tmux new-session`) would otherwise hold the pipe open forever.
func spawn(_ path: String, _ args: [String], capture: Bool = true) -> (status: Int32, output: String) {
    var fds: [Int32] = [0, 0]
    pipe(&fds)
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    if capture {
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
    } else {
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    }
    posix_spawn_file_actions_addclose(&actions, fds[0])
    posix_spawn_file_actions_addclose(&actions, fds[1])
    // A clean signal state: the test process may block or ignore signals the child needs.
    var attr = posix_spawnattr_t()
    posix_spawnattr_init(&attr)
    var empty = sigset_t()
    sigemptyset(&empty)
    var all = sigset_t()
    sigfillset(&all)
    posix_spawnattr_setsigmask(&attr, &empty)
    posix_spawnattr_setsigdefault(&attr, &all)
    posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    let argv = ([path] + args).map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    var pid: pid_t = 0
    let rc = posix_spawn(&pid, path, &actions, &attr, argv, environ)
    posix_spawn_file_actions_destroy(&actions)
    posix_spawnattr_destroy(&attr)
    close(fds[1])
    var output = [UInt8]()
    var buf = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = read(fds[0], &buf, buf.count)
        if n <= 0 { break }
        output += buf[0..<n]
    }
    close(fds[0])
    guard rc == 0 else { return (-1, "") }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    return ((status >> 8) & 0xFF, String(decoding: output, as: UTF8.self))
}
