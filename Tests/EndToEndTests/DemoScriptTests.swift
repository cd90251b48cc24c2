// scripts/demo.sh as a contributor runs it, on the programs this test run built.

import CSystem
import Foundation
import XCTest

final class DemoScriptTests: XCTestCase {
    /// What a pipe or a terminal gave, gathered on another thread, awaited as it comes.
    private final class Output: @unchecked Sendable {
        private let condition = NSCondition()
        private var data = Data()
        private var closed = false  // read to its end

        func append(_ more: Data) {
            condition.withLock { data.append(more) }
            condition.broadcast()
        }

        func close() {
            condition.withLock { closed = true }
            condition.broadcast()
        }

        var text: String { condition.withLock { String(decoding: data, as: UTF8.self) } }

        /// Whether the output came to hold `part` (nil: came to its end) within `seconds`.
        func await(_ part: String?, seconds: Double = 60) -> Bool {
            let deadline = Date().addingTimeInterval(seconds)
            return condition.withLock {
                func holds() -> Bool { part.map { String(decoding: data, as: UTF8.self).contains($0) } ?? closed }
                while !holds() { if !condition.wait(until: deadline) { return holds() } }
                return true
            }
        }
    }

    private let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Runs `script` with `env` added to this process's environment; nil (and a failure) when
    /// it does not end within a minute.
    private func runDemo(_ script: URL, env: [String: String]) throws -> (status: Int32, output: String, errors: String)? {
        let process = Process()
        // Process starts it as a process group of its own: a demo that hangs is stopped with all it started.
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = [script.path]
        process.environment = ProcessInfo.processInfo.environment.merging(env) { $1 }
        let pipe = Pipe(), errors = Pipe()
        process.standardOutput = pipe
        process.standardError = errors
        let ended = expectation(description: "the demo ends")
        process.terminationHandler = { _ in ended.fulfill() }
        try process.run()
        // Read on other threads, so that a demo that never ends fails the test instead of hanging it.
        let output = Output(), errorOutput = Output()
        let read = expectation(description: "its output is read to the end")
        read.expectedFulfillmentCount = 2
        for (handle, into) in [(pipe.fileHandleForReading, output), (errors.fileHandleForReading, errorOutput)] {
            DispatchQueue.global().async {
                into.append(handle.readDataToEndOfFile())
                read.fulfill()
            }
        }
        guard XCTWaiter.wait(for: [ended, read], timeout: 60) == .completed else {
            kill(-process.processIdentifier, SIGKILL)
            XCTFail("the demo did not end within a minute")
            return nil
        }
        return (process.terminationStatus, output.text, errorOutput.text)
    }

    func testTheDemoAsksGetsTheApprovalAndEnds() throws {
        let script = repository.appendingPathComponent("scripts/demo.sh")
        guard let run = try runDemo(script, env: ["PERMISSION_BIN_DIR": productsDirectory.path]) else { return }
        XCTAssertEqual(run.status, 0, run.output)
        XCTAssertTrue(run.output.contains("child: approved: Approve (by sam)"), run.output)
        XCTAssertTrue(run.output.contains("child: +15550100: known"), run.output)
    }

    /// A relay that cannot start ends the demo at once with what it said, rather than leave
    /// it waiting for a socket that never comes.
    func testARelayThatCannotStartEndsTheDemoWithItsReason() throws {
        let bin = FileManager.default.temporaryDirectory.appendingPathComponent("demo-bin-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: bin, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: bin) }
        let relay = bin.appendingPathComponent("permission-relay")
        try Data("#!/bin/sh\necho 'permission-relay: the data directory is on fire' >&2\nexit 1\n".utf8).write(to: relay)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: relay.path)
        let script = repository.appendingPathComponent("scripts/demo.sh")
        guard let run = try runDemo(script, env: ["PERMISSION_BIN_DIR": bin.path]) else { return }
        XCTAssertEqual(run.status, 1)
        XCTAssertEqual(run.errors, "demo: the relay did not start:\npermission-relay: the data directory is on fire\n")
    }

    /// `scripts/demo.sh --manual` on a pseudo-terminal, as someone at a terminal runs it:
    /// once the view shows the question, `keys` are typed in one write (as keys typed fast
    /// arrive in one read). Returns the status and all the terminal showed; nil (and a
    /// failure) when a step never comes.
    private func runManualDemo(typing keys: String) throws -> (status: Int32, screen: String)? {
        var name = [CChar](repeating: 0, count: 128)
        let master = cs_open_pty(&name, name.count)
        guard master >= 0 else {
            XCTFail("no pseudo-terminal: \(String(cString: strerror(errno)))")
            return nil
        }
        let path = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard let terminal = FileHandle(forUpdatingAtPath: path) else {
            close(master)
            XCTFail("cannot open \(path)")
            return nil
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = [repository.appendingPathComponent("scripts/demo.sh").path, "--manual"]
        process.environment = ProcessInfo.processInfo.environment.merging(["PERMISSION_BIN_DIR": productsDirectory.path]) { $1 }
        (process.standardInput, process.standardOutput, process.standardError) = (terminal, terminal, terminal)
        let screen = Output()
        do { try process.run() } catch {
            close(master)
            throw error
        }
        try terminal.close()
        // The thread owns the master side from here: it reads to the end (EIO once the demo
        // and all it started are gone), then closes it.
        Thread {
            var buf = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = read(master, &buf, buf.count)
                if n <= 0 { break }
                screen.append(Data(buf[0..<n]))
            }
            close(master)
            screen.close()
        }.start()
        func fail(_ why: String) -> (Int32, String)? {
            XCTFail("\(why): \(screen.text)")
            // SIGTERM first: the demo's own cleanup stops its relay and removes its directory.
            kill(-process.processIdentifier, SIGTERM)
            if !screen.await(nil, seconds: 10) { kill(-process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
            return nil
        }
        guard screen.await("1 pending") else { return fail("the view never showed the question") }
        _ = keys.utf8CString.withUnsafeBufferPointer { write(master, $0.baseAddress, $0.count - 1) }
        guard screen.await(nil) else { return fail("the demo did not end after \(keys.debugDescription)") }
        process.waitUntilExit()
        return (process.terminationStatus, screen.text)
    }

    /// Keys typed together, in one read, each count (`j` moves, `a` answers), and `q` right
    /// after an answer lets it go first.
    func testTheManualDemoTakesKeysTypedTogether() throws {
        guard let run = try runManualDemo(typing: "jaq") else { return }
        XCTAssertEqual(run.status, 0, run.screen)
        XCTAssertTrue(run.screen.contains("approved: Approve (by sam)"), run.screen)
    }

    /// Quitting the view without answering ends the demo, rather than leaving it waiting
    /// for the question to expire.
    func testTheManualDemoEndsWhenTheViewIsQuitWithoutAnAnswer() throws {
        guard let run = try runManualDemo(typing: "q") else { return }
        XCTAssertEqual(run.status, 0, run.screen)
        XCTAssertTrue(run.screen.contains("you quit without answering"), run.screen)
        XCTAssertFalse(run.screen.contains("run the same command again"), "the demo's relay is gone: " + run.screen)
    }

    /// Ctrl-C in the view (a key in its raw terminal, not a signal to the demo) ends the
    /// demo as it ends every program: with status 130.
    func testTheManualDemoStoppedByCtrlCEndsWith130() throws {
        guard let run = try runManualDemo(typing: "\u{03}") else { return }
        XCTAssertEqual(run.status, 130, run.screen)
        XCTAssertTrue(run.screen.contains("4. stopped by Ctrl-C: alex stops waiting"), run.screen)
    }

    /// Without PERMISSION_BIN_DIR the demo runs the release programs, and builds them first
    /// (saying so) when one is missing or older than a source: here in a copy of the script
    /// in a package of its own, with a `swift` on PATH that "builds" by linking to the
    /// programs this test run built, only those missing (as a build that changed no object
    /// file relinks nothing).
    func testWithoutABinDirItBuildsTheReleaseProgramsOnlyWhenMissingOrOlderThanTheirSources() throws {
        let fm = FileManager.default
        let package = fm.temporaryDirectory.appendingPathComponent("demo-\(UUID().uuidString.prefix(8))")
        defer { try? fm.removeItem(at: package) }
        for dir in ["scripts", "Sources/permission-relay", "tools"] {
            try fm.createDirectory(at: package.appendingPathComponent(dir), withIntermediateDirectories: true)
        }
        let script = package.appendingPathComponent("scripts/demo.sh")
        try fm.copyItem(at: repository.appendingPathComponent("scripts/demo.sh"), to: script)
        let source = package.appendingPathComponent("Sources/permission-relay/main.swift")
        for file in [package.appendingPathComponent("Package.swift"), source] {
            try Data().write(to: file)
            try fm.setAttributes([.modificationDate: Date().addingTimeInterval(-120)], ofItemAtPath: file.path)
        }
        let log = package.appendingPathComponent("swift.log")
        let swift = package.appendingPathComponent("tools/swift")
        try """
        #!/bin/bash
        echo "$*" >> \(log.path)
        [ "$*" = "build -c release" ] || exit 2
        mkdir -p .build/release
        for p in permission-relay permission-child permission-guardian; do
            [ -e .build/release/$p ] || printf '#!/bin/sh\\nexec %s/%s "$@"\\n' \(productsDirectory.path) $p > .build/release/$p
            chmod +x .build/release/$p
        done
        """.write(to: swift, atomically: true, encoding: .utf8)
        try fm.setAttributes([.posixPermissions: 0o755], ofItemAtPath: swift.path)
        let env = ["PATH": "\(swift.deletingLastPathComponent().path):\(ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")"]
        func builds() -> [String] { ((try? String(contentsOf: log, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init) }
        let bin = package.appendingPathComponent(".build/release").path

        guard let first = try runDemo(script, env: env) else { return }
        XCTAssertEqual(first.status, 0, first.output + first.errors)
        XCTAssertTrue(first.output.contains("child: approved: Approve (by sam)"), first.output)
        XCTAssertEqual(
            first.errors.split(separator: "\n").first,
            "demo: building the release programs with `swift build -c release` (\(bin)/permission-relay is missing)")
        XCTAssertEqual(builds(), ["build -c release"])

        guard let again = try runDemo(script, env: env) else { return }
        XCTAssertEqual(again.status, 0, again.output + again.errors)
        XCTAssertFalse(again.errors.contains("demo: building"), again.errors)
        XCTAssertEqual(builds(), ["build -c release"], "up to date: not built again")

        let past = Date().addingTimeInterval(-60)
        for file in ["permission-relay", "permission-child", "permission-guardian", ".demo-built"] {
            try fm.setAttributes([.modificationDate: past], ofItemAtPath: "\(bin)/\(file)")
        }
        try fm.setAttributes([.modificationDate: Date()], ofItemAtPath: source.path)
        guard let edited = try runDemo(script, env: env) else { return }
        XCTAssertEqual(edited.status, 0, edited.output + edited.errors)
        XCTAssertEqual(
            edited.errors.split(separator: "\n").first,
            "demo: building the release programs with `swift build -c release` "
                + "(Sources/permission-relay/main.swift is newer than \(bin)/permission-relay)")
        XCTAssertEqual(builds().count, 2)

        guard let built = try runDemo(script, env: env) else { return }
        XCTAssertEqual(built.status, 0, built.output + built.errors)
        XCTAssertFalse(built.errors.contains("demo: building"), "built since the edit, though nothing was relinked: \(built.errors)")
        XCTAssertEqual(builds().count, 2)
    }
}
