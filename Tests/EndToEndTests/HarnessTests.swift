// The scenario catalogue runs as part of the suite, and the scripted guardian answers
// a child's question by its policy.

import Foundation
import RelayProtocol
import XCTest

final class HarnessTests: XCTestCase {
    func testTheScenarioCatalogueEndToEnd() throws {
        let scenarios = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(
            "Scenarios")
        let files = try FileManager.default.contentsOfDirectory(atPath: scenarios.path).filter { $0.hasSuffix(".json") }.sorted()
        XCTAssertGreaterThanOrEqual(files.count, 24)
        let junit = FileManager.default.temporaryDirectory.appendingPathComponent("harness-\(UUID().uuidString).xml")
        defer { try? FileManager.default.removeItem(at: junit) }
        let run = try ProgramRun(
            "permission-harness", ["run"] + files.map { scenarios.appendingPathComponent($0).path } + ["--junit", junit.path], env: [:])
        var lines: [String] = []
        while let l = run.nextLine() { lines.append(l) }
        XCTAssertEqual(run.finish(), 0, lines.filter { $0.contains("FAIL") }.joined(separator: "\n"))
        XCTAssertEqual(lines.last, "\(files.count) passed, 0 failed")
        let xml = try String(contentsOf: junit, encoding: .utf8)
        XCTAssertEqual(xml.components(separatedBy: "<testcase ").count - 1, files.count)
        XCTAssertFalse(xml.contains("<failure"))
    }

    /// A report that could not be written is found out before the scenarios run.
    func testAReportThatCannotBeWrittenFailsTheRun() throws {
        let scenario = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Scenarios/cancel-then-reask.json")
        for report in ["/nonexistent-dir/report.xml", NSTemporaryDirectory()] {
            let run = try ProgramRun("permission-harness", ["run", scenario.path, "--junit", report], env: [:], stderrInLines: true)
            var lines: [String] = []
            while let l = run.nextLine() { lines.append(l) }
            XCTAssertEqual(run.finish(), 1)
            XCTAssertEqual(lines.count, 1, "refused before any scenario runs: \(lines)")
            XCTAssertTrue(lines.first?.contains("cannot write the JUnit report to \(report)") ?? false, "\(lines)")
        }
    }

    /// A report is written where it is asked for: through a link, which stays, and into a
    /// pipe (the harness's own stdout, named by /proc/self/fd/1, where a file put in its
    /// place could never be), rather than into a new file put in their place.
    func testAReportGoesThroughALinkAndIntoAPipe() throws {
        let scenario = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Scenarios/cancel-then-reask.json")
        let dir = try temporaryDirectory("harness-report")
        let target = dir.appendingPathComponent("report.xml").path
        let link = dir.appendingPathComponent("link.xml").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target)
        let linked = try ProgramRun("permission-harness", ["run", scenario.path, "--junit", link], env: [:])
        XCTAssertEqual(linked.finish(), 0)
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: link), target, "the link stays")
        XCTAssertTrue(try String(contentsOfFile: target, encoding: .utf8).contains("<testsuite "))

        let piped = try ProgramRun("permission-harness", ["run", scenario.path, "--junit", "/proc/self/fd/1"], env: [:])
        var lines: [String] = []
        while let l = piped.nextLine() { lines.append(l) }
        XCTAssertEqual(piped.finish(), 0, "\(lines)")
        XCTAssertTrue(lines.contains { $0.hasPrefix("<testsuite ") }, "the report follows the run's lines: \(lines)")
    }

    func testAFailingStepSaysWhatWasExpectedAndWhatCame() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("wrong-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: file) }
        try #"""
        {"name": "expects the wrong answer", "families": {"f": {"children": ["c"], "guardians": ["g"]}},
         "steps": [
           {"do": "ask", "actor": "c", "question": {"id": "Q1", "handles": ["phone:+1 555 0100"]}},
           {"do": "answer", "actor": "g", "id": "Q1", "choice": "decline"},
           {"do": "await", "actor": "c", "event": "response", "id": "Q1", "timeout": 2, "fields": {"choice": "approve"}}
         ]}
        """#.write(to: file, atomically: true, encoding: .utf8)
        let run = try ProgramRun("permission-harness", ["run", file.path], env: [:])
        var lines: [String] = []
        while let l = run.nextLine() { lines.append(l) }
        XCTAssertEqual(run.finish(), 1)
        let failure = lines.first { $0.contains("FAIL") } ?? ""
        XCTAssertTrue(
            failure.contains("step 3 (await)") && failure.contains(#""choice":"approve""#) && failure.contains(#""choice":"decline""#),
            failure)
        XCTAssertEqual(lines.last, "0 passed, 1 failed")
    }

    func testAScenarioThatCannotBeUsedSaysWhy() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("scenarios-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let cut = dir.appendingPathComponent("cut.json")
        try Data(#"{"steps": ["#.utf8).write(to: cut)
        let list = dir.appendingPathComponent("list.json")
        try Data("[1]".utf8).write(to: list)
        let missing = dir.appendingPathComponent("missing.json")
        let typo = dir.appendingPathComponent("typo.json")
        try Data(#"{"steps": [{"do": "sleep", "seconds": "2"}]}"#.utf8).write(to: typo)
        let unnamed = dir.appendingPathComponent("unnamed.json")
        try Data(#"{"devices": {"tablet": ["c"], "laptop": ["g"]}, "steps": [{"do": "kill-relay"}]}"#.utf8).write(to: unnamed)
        let hubless = dir.appendingPathComponent("hubless.json")
        try Data(#"{"steps": [{"do": "cut-link"}]}"#.utf8).write(to: hubless)
        // Mistyped keys fail the scenario, rather than leaving out what they say (a check, say).
        var mistyped: [URL] = []
        for (i, text) in [
            "{}", #"{"step": [{"do": "sleep", "seconds": 0}]}"#,
            #"{"steps": [{"do": "answer", "actor": "g", "id": "Q1", "choice": "approve", "expct": {"error": "notFound"}}]}"#,
            #"{"steps": [{"do": "anwser"}]}"#, #"{"steps": [{"do": "ask", "actor": "c", "question": {"handle": ["phone:+1 555 0100"]}}]}"#,
            #"{"families": {"f": {"children": ["c"], "guardian": ["g"]}}, "steps": [{"do": "sleep", "seconds": 0}]}"#,
        ].enumerated() {
            mistyped.append(dir.appendingPathComponent("mistyped-\(i).json"))
            try Data(text.utf8).write(to: mistyped[i])
        }
        let run = try ProgramRun(
            "permission-harness",
            ["run", missing.path, cut.path, list.path, dir.path, typo.path, unnamed.path, hubless.path] + mistyped.map(\.path), env: [:])
        var lines: [String] = []
        while let l = run.nextLine() { lines.append(l) }
        XCTAssertEqual(run.finish(), 1)
        let failures = lines.filter { $0.contains("FAIL") }
        XCTAssertEqual(failures.count, 13, "\(lines)")
        let reasons = [
            "no such file", "is not valid JSON: unexpected end of input", "is not a JSON object", "it is a directory",
            #"step 1 (sleep): "seconds" must be a number of seconds"#, "step 1 (kill-relay): which device? name one: laptop, tablet",
            #"step 1 (cut-link): cut-link needs a scenario with "devices""#, #"the scenario has no "steps""#,
            #"the scenario: unknown key "step" (did you mean steps?)"#, #"step 1 (answer): unknown key "expct" (did you mean expect?)"#,
            #"step 1: unknown step "anwser" (did you mean answer?)"#,
            #"step 1 (ask)'s question: unknown key "handle" (did you mean handles?)"#,
            #"family f: unknown key "guardian" (did you mean guardians?)"#,
        ]
        for (line, why) in zip(failures, reasons) {
            XCTAssertTrue(line.contains(why), "\(line) should say \(why)")
        }
        XCTAssertEqual(lines.last, "0 passed, 13 failed")
    }

    func testScenariosAgainstARunningRelay() throws {
        let relay = try RelayProcess()
        try relay.start()
        let scenarios = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(
            "Scenarios")
        let files = ["two-guardians-racing.json", "cancel-then-reask.json"].map { scenarios.appendingPathComponent($0).path }
        let twice = try ProgramRun("permission-harness", ["run"] + files + files + ["--socket", relay.socket], env: [:])
        var lines: [String] = []
        while let l = twice.nextLine() { lines.append(l) }
        XCTAssertEqual(twice.finish(), 0, lines.joined(separator: "\n"))
        XCTAssertEqual(lines.last, "4 passed, 0 failed", "names are made unique, so a scenario runs twice on one relay")
        // The timeline says what each family is called on the relay, where it stays.
        let named = lines.compactMap { line in line.range(of: " on the relay): ").map { _ in line.split(separator: "(")[1] } }
        XCTAssertGreaterThanOrEqual(named.count, 4, lines.joined(separator: "\n"))
        XCTAssertEqual(Set(named).count, named.count, "each run's families have names of their own: \(named)")

        // A scenario that kills the relay cannot run there, and is refused before it adds anything.
        let before = try relay.admin().request(["type": "status"])["families"]?.int
        let killing = try ProgramRun(
            "permission-harness",
            ["run", scenarios.appendingPathComponent("relay-killed-between-ask-and-answer.json").path, "--socket", relay.socket],
            env: [:])
        var said: [String] = []
        while let l = killing.nextLine() { said.append(l) }
        XCTAssertEqual(killing.finish(), 1)
        XCTAssertTrue(said.contains { $0.contains("its step \"kill-relay\" needs the harness's own relay") }, "\(said)")
        XCTAssertEqual(try relay.admin().request(["type": "status"])["families"]?.int, before, "nothing was added")
    }

    /// Runs `executable` (a path, or a name looked up on `path` as a shell would, so that its
    /// argv[0] is the bare name) in `directory` with `PATH=path` and returns its status and
    /// its stdout and stderr together; stopped after a minute.
    private func runHarness(_ executable: String, _ args: [String], in directory: URL, path: String) throws -> (
        status: Int32, lines: [String]
    ) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["PATH=\(path)", executable] + args
        p.currentDirectoryURL = directory
        var env = ProcessInfo.processInfo.environment
        env["PATH"] = path
        p.environment = env
        let out = Pipe()
        p.standardOutput = out
        p.standardError = out
        try p.run()
        let stop = killAfter(p, seconds: 60)
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        stop.cancel()
        return (p.terminationStatus, text.split(separator: "\n").map(String.init))
    }

    private func temporaryDirectory(_ name: String) throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(at: dir) }
        return dir
    }

    /// As README.md has it, the programs on PATH (here through a link to the built harness
    /// in a directory of its own): the relay is found beside the harness's own executable,
    /// whatever the working directory and argv[0].
    func testTheHarnessRunFromPathFindsTheRelayBesideItself() throws {
        let scenario = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Scenarios/relay-killed-between-ask-and-answer.json")
        let bin = try temporaryDirectory("harness-bin"), elsewhere = try temporaryDirectory("harness-cwd")
        try FileManager.default.createSymbolicLink(
            at: bin.appendingPathComponent("permission-harness"),
            withDestinationURL: productsDirectory.appendingPathComponent("permission-harness"))
        let path = "\(bin.path):/usr/local/bin:/usr/bin:/bin"
        XCTAssertFalse(path.split(separator: ":").contains { $0 == productsDirectory.path })
        let run = try runHarness("permission-harness", ["run", scenario.path], in: elsewhere, path: path)
        XCTAssertEqual(run.status, 0, run.lines.joined(separator: "\n"))
        XCTAssertEqual(run.lines.last, "1 passed, 0 failed", run.lines.joined(separator: "\n"))
    }

    /// A harness with no relay beside it: the relay on PATH, and when there is none there
    /// either, one line that says where it looked and what to do.
    func testAHarnessWithoutARelaySaysWhereItLookedOrUsesTheOneOnPath() throws {
        let scenario = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Scenarios/denial.json")
        let alone = try temporaryDirectory("harness-alone")
        let harness = alone.appendingPathComponent("permission-harness")
        try FileManager.default.copyItem(at: productsDirectory.appendingPathComponent("permission-harness"), to: harness)

        let missing = try runHarness(harness.path, ["run", scenario.path], in: alone, path: "")
        XCTAssertEqual(missing.status, 1)
        XCTAssertEqual(
            missing.lines,
            [
                "permission-harness: cannot find permission-relay beside \(harness.resolvingSymlinksInPath().path) or on PATH; "
                    + "build it with `swift build -c release`, or pass --relay PATH (or --socket PATH for a running relay)"
            ])

        let onPath = try runHarness(harness.path, ["run", scenario.path], in: alone, path: productsDirectory.path)
        XCTAssertEqual(onPath.status, 0, onPath.lines.joined(separator: "\n"))
        XCTAssertEqual(onPath.lines.last, "1 passed, 0 failed")

        let given = try runHarness(
            harness.path, ["run", scenario.path, "--relay", productsDirectory.appendingPathComponent("permission-relay").path], in: alone,
            path: "")
        XCTAssertEqual(given.status, 0, given.lines.joined(separator: "\n"))
        XCTAssertEqual(given.lines.last, "1 passed, 0 failed")
    }

    /// Stopped by a signal in the middle of a scenario, `run` leaves no relay, actor or
    /// directory of the scenario behind, and ends as the signal asks, without reporting the
    /// step the stop cut short (its guardian waits for a question) as failed.
    func testARunStoppedByASignalLeavesNothingBehind() throws {
        let dir = try temporaryDirectory("harness-stop")
        let scenario = dir.appendingPathComponent("long.json")
        try Data(
            #"""
            {"name": "long", "families": {"f": {"children": ["kid"], "guardians": ["mum"]}},
             "steps": [{"do": "start-actor", "actor": "mum"},
                       {"do": "await", "actor": "mum", "event": "question", "id": "Q1", "timeout": 120}]}
            """#.utf8
        ).write(to: scenario)
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            let run = try ProgramRun("permission-harness", ["run", scenario.path], env: [:])
            let giveUp = run.stopAfter(seconds: 60, signal: SIGKILL)
            defer { giveUp.cancel() }
            XCTAssertNotNil(run.nextLine(containing: "started"))
            let children = childProcesses(of: run.process.processIdentifier)
            let scenarioDir = try XCTUnwrap(
                children.lazy.compactMap { c in c.command.firstRange(of: #/\/tmp\/harness-[0-9A-F]{8}/#).map { String(c.command[$0]) } }
                    .first,
                "\(children)")
            XCTAssertEqual(children.count, 2, "the relay and the actor: \(children)")
            XCTAssertFalse(children.contains { $0.command.contains("--token") }, "a token stays out of the process list: \(children)")
            kill(run.process.processIdentifier, sig)
            XCTAssertEqual(run.finish(), 128 + sig)
            while run.nextLine() != nil {}
            XCTAssertFalse(run.lines.contains { $0.contains("FAIL") || $0.contains("failed") }, "signal \(sig): \(run.lines)")
            for child in children {
                XCTAssertTrue(gone(child.pid), "\(child.command) stopped with the harness")
            }
            XCTAssertFalse(FileManager.default.fileExists(atPath: scenarioDir), "\(scenarioDir) is removed")
        }
    }

    /// A reader that goes (`| head`) stops `run` at its next line, status 1, and it leaves
    /// nothing behind, as a signal's stop does.
    func testARunWhoseReaderGoesLeavesNothingBehind() throws {
        let dir = try temporaryDirectory("harness-reader")
        let scenario = dir.appendingPathComponent("two.json")
        try Data(
            #"""
            {"name": "two", "families": {"f": {"children": ["kid"], "guardians": ["mum"]}},
             "steps": [{"do": "start-actor", "actor": "mum"},
                       {"do": "await", "actor": "mum", "event": "question", "id": "Q1", "timeout": 1},
                       {"do": "start-actor", "actor": "kid"}]}
            """#.utf8
        ).write(to: scenario)
        let out = Pipe()
        let run = Process()
        run.executableURL = productsDirectory.appendingPathComponent("permission-harness")
        run.arguments = ["run", scenario.path]
        run.standardOutput = out
        run.standardError = FileHandle.nullDevice
        try run.run()
        let stray = killAfter(run, seconds: 60)
        defer { stray.cancel() }
        var seen = ""
        while !seen.contains(" started") {
            let chunk = out.fileHandleForReading.availableData
            guard !chunk.isEmpty else { return XCTFail("the actor never started: \(seen)") }
            seen += String(decoding: chunk, as: UTF8.self)
        }
        let children = childProcesses(of: run.processIdentifier)
        XCTAssertEqual(children.count, 2, "the relay and the actor: \(children)")
        try out.fileHandleForReading.close()  // the reader goes; the await's failure is the next line
        run.waitUntilExit()
        XCTAssertEqual(run.terminationStatus, 1)
        XCTAssertEqual(run.terminationReason, .exit, "it ends itself, not by SIGPIPE")
        for child in children { XCTAssertTrue(gone(child.pid), "\(child.command) stopped with the harness") }
        for c in children {
            if let d = c.command.firstRange(of: #/\/tmp\/harness-[0-9A-F]{8}/#) {
                XCTAssertFalse(FileManager.default.fileExists(atPath: String(c.command[d])), "\(c.command[d]) is removed")
            }
        }
    }

    /// The processes whose parent is `pid`, with their command lines.
    private func childProcesses(of pid: Int32) -> [(pid: Int32, command: String)] {
        let all = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return all.compactMap { name -> (Int32, String)? in
            guard let child = Int32(name),
                let stat = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
                let afterName = stat.range(of: ") ", options: .backwards),
                stat[afterName.upperBound...].split(separator: " ").dropFirst().first == Substring(String(pid)),
                let cmdline = FileManager.default.contents(atPath: "/proc/\(name)/cmdline")
            else { return nil }
            return (child, String(decoding: cmdline.map { $0 == 0 ? 32 : $0 }, as: UTF8.self))
        }
    }

    /// Whether `pid` is gone (or a zombie, dead but not yet reaped by whoever inherited it),
    /// waiting up to 10 s: a killed process's end cannot be awaited from here.
    private func gone(_ pid: Int32) -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        repeat {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let name = stat.range(of: ") ", options: .backwards)
            else { return true }
            if stat[name.upperBound...].hasPrefix("Z") { return true }
            usleep(20_000)
        } while ContinuousClock.now < deadline
        return false
    }

    /// It answers as its policy says, and stopped with Ctrl-C it ends with 130 and leaves
    /// the family (runs do not pile up guardians).
    func testScriptedGuardianApprovesByPolicyAndLeavesTheFamilyWhenStopped() throws {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let unsaid = try ProgramRun("permission-harness", ["guardian", "--family", "f0", "--socket", relay.socket], env: [:])
        XCTAssertEqual(unsaid.finish(), 64, "a guardian answers nothing it was not told how to")
        for policy in ["approve-after:-2s", "approve-after:1e20s", "approve-after", "approve:2s", "maybe"] {
            let run = try ProgramRun(
                "permission-harness", ["guardian", "--family", "f0", "--policy", policy, "--socket", relay.socket], env: [:])
            let giveUp = run.stopAfter(seconds: 20, signal: SIGKILL)  // taken, it would run until stopped
            XCTAssertEqual(run.finish(), 64, policy)
            giveUp.cancel()
        }
        let bot = try ProgramRun(
            "permission-harness", ["guardian", "--family", "f0", "--policy", "approve-after:0.2s", "--socket", relay.socket], env: [:],
            stderrInLines: true)
        defer { bot.stop() }
        let giveUp = bot.stopAfter(seconds: 60, signal: SIGKILL)  // a line that never comes fails the test, not CI
        defer { giveUp.cancel() }
        let joined = try XCTUnwrap(bot.nextLine(containing: "joined f0 as "))
        let member = try XCTUnwrap(joined.split(separator: " ").dropFirst(3).first?.split(separator: ";").first.map(String.init))
        XCTAssertTrue(member.hasPrefix("harness-guardian-"), joined)
        let child = try ProgramRun(
            "permission-child", ["ask", "+15550100", "--wait", "--member", "c0", "--token", tokens["c0"]!, "--session", "s"],
            env: ["PERMISSION_RELAY_SOCKET": relay.socket, "PERMISSION_STATE_DIR": relay.dir.appendingPathComponent("state").path])
        XCTAssertEqual(child.finish(), 0)
        XCTAssertEqual(child.nextLine(), "approved: Approve (by \(member))")
        XCTAssertNotNil(bot.nextLine(containing: ": approve"), "the bot says what it answered")

        kill(bot.process.processIdentifier, SIGINT)
        XCTAssertEqual(bot.finish(), 130)
        let again = try relay.admin().request(["type": "removeMember", "member": .string(member)])
        XCTAssertEqual(again["code"]?.string, "notFound", "the bot removed itself: \(again)")
    }
}
