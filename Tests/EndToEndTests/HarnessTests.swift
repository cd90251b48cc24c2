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
        XCTAssertGreaterThanOrEqual(files.count, 18)
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

    func testAReportThatCannotBeWrittenFailsTheRun() throws {
        let scenario = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Scenarios/cancel-then-reask.json")
        let run = try ProgramRun("permission-harness", ["run", scenario.path, "--junit", "/nonexistent-dir/report.xml"], env: [:])
        var lines: [String] = []
        while let l = run.nextLine() { lines.append(l) }
        XCTAssertEqual(lines.last, "1 passed, 0 failed")
        XCTAssertNotEqual(run.finish(), 0, "the scenarios passed, but the report asked for was not written")
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
        let run = try ProgramRun("permission-harness", ["run", missing.path, cut.path, list.path, dir.path, typo.path], env: [:])
        var lines: [String] = []
        while let l = run.nextLine() { lines.append(l) }
        XCTAssertEqual(run.finish(), 1)
        let failures = lines.filter { $0.contains("FAIL") }
        XCTAssertEqual(failures.count, 5, "\(lines)")
        let reasons = [
            "no such file", "is not valid JSON: unexpected end of input", "is not a JSON object", "it is a directory",
            #"step 1 (sleep): "seconds" must be a number of seconds"#,
        ]
        for (line, why) in zip(failures, reasons) {
            XCTAssertTrue(line.contains(why), "\(line) should say \(why)")
        }
        XCTAssertEqual(lines.last, "0 passed, 5 failed")
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
    }

    func testScriptedGuardianApprovesByPolicy() throws {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let bot = try ProgramRun(
            "permission-harness", ["guardian", "--family", "f0", "--policy", "approve-after:0.2s", "--socket", relay.socket], env: [:])
        defer { bot.stop() }
        let child = try ProgramRun(
            "permission-child", ["ask", "+15550100", "--wait", "--member", "c0", "--token", tokens["c0"]!, "--session", "s"],
            env: ["PERMISSION_RELAY_SOCKET": relay.socket, "PERMISSION_STATE_DIR": relay.dir.appendingPathComponent("state").path])
        XCTAssertEqual(child.finish(), 0)
        XCTAssertTrue(child.nextLine()?.hasPrefix("approved: Approve (by harness-guardian-") ?? false)
    }
}
