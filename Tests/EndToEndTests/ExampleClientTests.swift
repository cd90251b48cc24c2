// Runs the Python client of protocol.md against the real relay, so the example never rots.

import Foundation
import XCTest

final class ExampleClientTests: XCTestCase {
    func testProtocolDocumentPythonClientCompletesACycle() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let doc = try String(contentsOf: root.appendingPathComponent("protocol.md"), encoding: .utf8)
        guard let section = doc.range(of: "## A client in Python"),
            let start = doc.range(of: "```python\n", range: section.upperBound..<doc.endIndex),
            let end = doc.range(of: "\n```", range: start.upperBound..<doc.endIndex)
        else { return XCTFail("protocol.md has no Python client block") }
        let script = String(doc[start.upperBound..<end.lowerBound])

        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let file = relay.dir.appendingPathComponent("client.py")
        try script.write(to: file, atomically: true, encoding: .utf8)

        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", file.path]
        p.environment = [
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin", "RELAY_SOCKET": relay.socket,
            "CHILD": "c0", "CHILD_TOKEN": tokens["c0"]!, "GUARDIAN": "g0", "GUARDIAN_TOKEN": tokens["g0"]!,
        ]
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        let o = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let e = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, e)
        XCTAssertTrue(o.contains("child got approve from g0"), o + e)
    }
}
