// docs/operations.md's backup and restore, followed as written: its commands run in a
// fresh home (its example paths made this machine's), and the restored relay has what
// the backup had and nothing after it.

import Foundation
import XCTest

final class OperationsGuideTests: XCTestCase {
    func testBackupAndRestoreWorkAsTheGuideSays() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let guide = try String(contentsOf: root.appendingPathComponent("docs/operations.md"), encoding: .utf8)
        guard let start = guide.range(of: "\n## Backup and restore\n"),
            let end = guide.range(of: "\n## ", range: start.upperBound..<guide.endIndex)
        else { return XCTFail("docs/operations.md has no backup and restore section") }
        // The section's two blocks: backing up (the relay running), and restoring (it stopped).
        var blocks: [[String]] = []
        var inBlock = false
        for line in guide[start.upperBound..<end.lowerBound].split(separator: "\n") {
            if line.hasPrefix("```") {
                inBlock = line == "```sh"
                if inBlock { blocks.append([]) }
            } else if inBlock {
                blocks[blocks.count - 1].append(String(line.split(separator: "#", maxSplits: 1)[0]).trimmingCharacters(in: .whitespaces))
            }
        }
        XCTAssertEqual(blocks.count, 2, "a block to back up, one to restore")
        guard blocks.count == 2 else { return }

        let dir = URL(fileURLWithPath: "/tmp").appendingPathComponent("pops-\(UUID().uuidString.prefix(8))")
        let home = dir.appendingPathComponent("home").path, runtime = dir.appendingPathComponent("run").path
        let backups = dir.appendingPathComponent("backups").path
        for d in [home, runtime, backups] { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        chmod(runtime, 0o700)
        defer { try? FileManager.default.removeItem(at: dir) }
        let data = home + "/.local/state/permission-relay"
        let env = [
            "HOME": home, "XDG_RUNTIME_DIR": runtime, "PATH": productsDirectory.path + ":/usr/bin:/bin",
        ]
        func local(_ command: String) -> String {
            command.replacingOccurrences(of: "/backups", with: backups).replacingOccurrences(of: "/var/lib/permission-relay", with: data)
                .replacingOccurrences(of: "2026-12-01", with: "$(date +%F)")
        }
        func sh(_ command: String) -> (status: Int32, output: String) {
            runToEnd(process(["/bin/bash", "-c", command], environment: env))
        }
        func serve() throws -> Process {
            let p = Process()
            p.executableURL = productsDirectory.appendingPathComponent("permission-relay")
            p.arguments = ["serve"]
            p.environment = env
            let out = Pipe()
            p.standardOutput = out
            p.standardError = FileHandle.nullDevice
            try p.run()
            XCTAssertTrue(String(decoding: out.fileHandleForReading.availableData, as: UTF8.self).contains("listening on"))
            return p
        }

        var relay = try serve()
        XCTAssertEqual(sh("permission-relay family create smiths").status, 0)
        for command in blocks[0] {
            let r = sh(local(command))
            XCTAssertEqual(r.status, 0, "\(command):\n\(r.output)")
        }
        XCTAssertEqual(sh("permission-relay family create after-the-backup").status, 0)
        relay.terminate()
        relay.waitUntilExit()
        for command in blocks[1] {
            let r = sh(local(command))
            XCTAssertEqual(r.status, 0, "\(command):\n\(r.output)")
        }
        XCTAssertTrue(FileManager.default.fileExists(atPath: data + "/relay.db.replaced"), "the store it replaced is kept")
        relay = try serve()
        defer {
            relay.terminate()
            relay.waitUntilExit()
        }
        XCTAssertEqual(sh("permission-relay family create smiths").status, 1, "the backup's family is there")
        XCTAssertEqual(sh("permission-relay family create after-the-backup").status, 0, "what came after it is not")
    }
}
