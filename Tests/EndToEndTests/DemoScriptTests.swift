// scripts/demo.sh as a contributor runs it, on the programs this test run built.

import Foundation
import XCTest

final class DemoScriptTests: XCTestCase {
    /// What a pipe gave, gathered on another thread.
    private final class Output: @unchecked Sendable {
        private let lock = NSLock()
        private var data = Data()
        func append(_ more: Data) { lock.withLock { data.append(more) } }
        var text: String { lock.withLock { String(decoding: data, as: UTF8.self) } }
    }

    func testTheDemoAsksGetsTheApprovalAndEnds() throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/demo.sh")
        let process = Process()
        // Process starts it as a process group of its own: a demo that hangs is stopped with all it started.
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = [script.path]
        process.environment = ProcessInfo.processInfo.environment.merging(["PERMISSION_BIN_DIR": productsDirectory.path]) { $1 }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        let ended = expectation(description: "the demo ends")
        process.terminationHandler = { _ in ended.fulfill() }
        try process.run()
        // Read on another thread, so that a demo that never ends fails the test instead of hanging it.
        let output = Output(), read = expectation(description: "its output is read to the end")
        let reader = pipe.fileHandleForReading
        DispatchQueue.global().async {
            output.append(reader.readDataToEndOfFile())
            read.fulfill()
        }
        guard XCTWaiter.wait(for: [ended, read], timeout: 60) == .completed else {
            kill(-process.processIdentifier, SIGKILL)
            return XCTFail("the demo did not end within a minute")
        }
        XCTAssertEqual(process.terminationStatus, 0, output.text)
        XCTAssertTrue(output.text.contains("child: approved: Approve (by sam)"), output.text)
        XCTAssertTrue(output.text.contains("child: +15550100: known"), output.text)
    }
}
