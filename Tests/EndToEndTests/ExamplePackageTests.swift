// Examples/AskApp, the package README.md shows for the library: built as a user builds it
// (a package of its own, depending on this clone by path), run against the real relay,
// and compared with the README, so that neither the example nor the README can rot.

import Foundation
import RelayProtocol
import XCTest

final class ExamplePackageTests: XCTestCase {
    private let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    private var example: URL { root.appendingPathComponent("Examples/AskApp") }

    func testTheREADMEShowsTheExamplePackageAsItIs() throws {
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        guard let start = readme.range(of: "\n## The PermissionKit library\n") else { return XCTFail("README.md has no library section") }
        let end = readme.range(of: "\n## ", range: start.upperBound..<readme.endIndex)?.lowerBound ?? readme.endIndex
        var blocks: [String] = []
        var rest = readme[start.upperBound..<end]
        while let open = rest.range(of: "```swift\n"), let close = rest.range(of: "\n```\n", range: open.upperBound..<rest.endIndex) {
            blocks.append(String(rest[open.upperBound..<close.lowerBound]) + "\n")
            rest = rest[close.upperBound...]
        }
        let package = try String(contentsOf: example.appendingPathComponent("Package.swift"), encoding: .utf8)
        XCTAssertEqual(blocks, [package], "the section shows the example's Package.swift as it is, and no other Swift")
        XCTAssertTrue(readme[start.upperBound..<end].contains("(Examples/AskApp/Sources/AskApp/main.swift)"), "and links its main.swift")
    }

    func testTheExampleAppBuildsAsItsOwnPackageAndGetsAGuardiansApproval() throws {
        // A scratch path of its own: the `swift test` running this holds the root's .build.
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("askapp-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let started = ContinuousClock.now
        let build = run(
            URL(fileURLWithPath: "/usr/bin/env"), ["swift", "build", "--package-path", example.path, "--scratch-path", scratch.path],
            env: [:], seconds: 600)
        XCTAssertEqual(build.status, 0, build.stdout + build.stderr)
        guard build.status == 0 else { return }
        print("Examples/AskApp built in \(ContinuousClock.now - started)")

        // Without credentials it says which are missing, and nothing of a "system error".
        let unset = ["PERMISSION_MEMBER": "", "PERMISSION_TOKEN": "", "PERMISSION_CREDENTIALS": "", "PERMISSION_STATE_DIR": scratch.path]
        let bare = run(scratch.appendingPathComponent("debug/AskApp"), [], env: unset, seconds: 30)
        XCTAssertEqual(bare.status, 1)
        XCTAssertTrue(bare.stderr.hasPrefix("AskApp: no credentials") && bare.stderr.contains("PERMISSION_CREDENTIALS"), bare.stderr)
        XCTAssertFalse(bare.stderr.contains("system error"), bare.stderr)

        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let guardian = try relay.connect()
        _ = try guardian.hello("g0", tokens["g0"]!)  // before the ask: an ephemeral session sees what comes after

        /// The app started to ask about `value`, once it says it waits, and the question the guardian got.
        typealias Run = (app: Process, out: Pipe, err: Pipe, question: JSON?, stuck: DispatchWorkItem, early: String)
        func ask(_ value: String) throws -> Run {
            let app = Process()
            app.executableURL = scratch.appendingPathComponent("debug/AskApp")
            app.arguments = [value]
            app.environment = [
                "PERMISSION_RELAY_SOCKET": relay.socket, "PERMISSION_MEMBER": "c0", "PERMISSION_TOKEN": tokens["c0"]!,
                "PERMISSION_STATE_DIR": relay.dir.appendingPathComponent("state").path,
            ]
            let out = Pipe(), err = Pipe()
            app.standardOutput = out
            app.standardError = err
            try app.run()
            let stuck = killAfter(app, seconds: 60)
            let asked = try guardian.event("question")["question"]
            XCTAssertEqual(asked?["child"]?.string, "c0")
            XCTAssertEqual(asked?["topic"]?["personInformation"]?.array?.first?["handle"]?["value"]?.string, value)
            // Its first line comes through the pipe while it waits, not at its exit.
            var waiting = Data()
            while !waiting.contains(UInt8(ascii: "\n")) {
                let chunk = out.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                waiting.append(chunk)
            }
            // The lines after it may come in the same read.
            let read = String(decoding: waiting, as: UTF8.self)
            let firstLine = read.prefix { $0 != "\n" }
            XCTAssertEqual(String(firstLine), "asked to message \(value); waiting for a guardian")
            return (app, out, err, asked, stuck, String(read.dropFirst(firstLine.count + 1)))
        }
        func answer(_ question: JSON?, _ choice: String) throws {
            let r = try guardian.request(["type": "answer", "questionId": question?["id"] ?? "", "choice": .string(choice)])
            XCTAssertEqual(r["type"]?.string, "ok", "\(r)")
        }
        func end(_ run: Run) -> (Int32, String, String) {
            let stdout = run.early + String(decoding: run.out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            let stderr = String(decoding: run.err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            run.app.waitUntilExit()
            run.stuck.cancel()
            return (run.app.terminationStatus, stdout, stderr)
        }

        let first = try ask("+1 555 0100")
        XCTAssertEqual(first.question?["topic"]?["actions"], ["message"])
        XCTAssertNotNil(first.question?["expirationDate"]?.string)
        try answer(first.question, "approve")
        let (status, stdout, stderr) = end(first)
        XCTAssertEqual(status, 0, stdout + stderr)
        XCTAssertEqual(stdout, "approved by g0: Approve\n")
        XCTAssertEqual(stderr, "")

        // Stopped while it waits, then answered: the next run, waiting for its own answer,
        // says that one too rather than let it go unseen.
        let stopped = try ask("+1 555 0101")
        stopped.app.terminate()
        _ = end(stopped)
        try answer(stopped.question, "approve")
        let next = try ask("+1 555 0102")
        try answer(next.question, "decline")
        let (nextStatus, nextOut, nextErr) = end(next)
        XCTAssertEqual(nextStatus, 2, nextOut + nextErr)
        XCTAssertEqual(nextOut, "an earlier question was answered: approved by g0\ndenied by g0: Decline\n")
    }

    /// Runs a program to its end (killed after `seconds`): its status and what it printed.
    private func run(_ program: URL, _ args: [String], env: [String: String], seconds: Double) -> (
        status: Int32, stdout: String, stderr: String
    ) {
        let p = Process()
        p.executableURL = program
        p.arguments = args
        p.environment = ProcessInfo.processInfo.environment.merging(env) { $1 }
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        do { try p.run() } catch { return (-1, "", "cannot run \(program.path): \(error)") }
        let pid = p.processIdentifier
        let stuck = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds, execute: stuck)
        defer { stuck.cancel() }
        // stderr on another thread: a pipe that fills while stdout is read would stop the program.
        let errData = LockedData()
        let readErr = DispatchGroup()
        readErr.enter()
        DispatchQueue.global().async {
            errData.set(err.fileHandleForReading.readDataToEndOfFile())
            readErr.leave()
        }
        let o = out.fileHandleForReading.readDataToEndOfFile()
        readErr.wait()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: o, as: UTF8.self), String(decoding: errData.get(), as: UTF8.self))
    }
}

private final class LockedData: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    func set(_ d: Data) { lock.withLock { data = d } }
    func get() -> Data { lock.withLock { data } }
}
