// README.md's walkthrough, followed literally: every `$ command` of the section runs as
// written (in a fresh home, with the programs under test as .build/release), and what
// the README shows after it is what comes out. The relay runs in the background as in
// terminal 1, the guardian's view in tmux as in terminal 2, where `a` is pressed once
// the child's question shows.

import Foundation
import XCTest

final class ReadmeWalkthroughTests: XCTestCase {
    /// One `$ command` of the walkthrough and the lines the README shows under it.
    struct Step {
        var command: String
        var expected: [String]
    }

    static func steps(of readme: String) throws -> [Step] {
        guard let start = readme.range(of: "\n## Walkthrough"),
            let end = readme.range(of: "\n## ", range: start.upperBound..<readme.endIndex)
        else { throw XCTSkip("README.md has no walkthrough section") }
        var steps: [Step] = []
        var inBlock = false
        var continuing = false
        for line in readme[start.upperBound..<end.lowerBound].split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") {
                inBlock = line == "```sh"
                continue
            }
            guard inBlock else { continue }
            if continuing, var last = steps.popLast() {
                last.command = String(last.command.dropLast()) + " " + line.trimmingCharacters(in: .whitespaces)
                steps.append(last)
            } else if line.hasPrefix("$ ") {
                steps.append(Step(command: String(line.dropFirst(2)), expected: []))
            } else if var last = steps.popLast() {
                last.expected.append(String(line))
                steps.append(last)
            }
            continuing = steps.last?.command.hasSuffix("\\") ?? false
        }
        return steps
    }

    func testTheWalkthroughWorksAsWritten() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/tmux") else {
            return XCTFail("tmux is needed for this test (`apt-get install tmux`; .ci/run installs it)")
        }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let steps = try Self.steps(of: String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8))
        XCTAssertGreaterThan(steps.count, 8, "the walkthrough's commands")

        // A clone as the reader has it: the programs under test as .build/release, protocol.md.
        let dir = URL(fileURLWithPath: "/tmp").appendingPathComponent("pwalk-\(UUID().uuidString.prefix(8))")
        let work = dir.appendingPathComponent("PermissionRelay")
        try FileManager.default.createDirectory(at: work.appendingPathComponent(".build"), withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        try FileManager.default.createSymbolicLink(at: work.appendingPathComponent(".build/release"), withDestinationURL: productsDirectory)
        try FileManager.default.copyItem(at: root.appendingPathComponent("protocol.md"), to: work.appendingPathComponent("protocol.md"))
        let home = dir.appendingPathComponent("home").path, runtime = dir.appendingPathComponent("run").path
        for d in [home, runtime] { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        chmod(runtime, 0o700)
        let shell = Shell(
            cwd: work.path,
            env: [
                "HOME": home, "XDG_RUNTIME_DIR": runtime, "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "xterm",
            ])
        // The README's example paths, as they are on this machine.
        func local(_ text: String) -> String {
            text.replacingOccurrences(of: "/run/user/1000", with: runtime).replacingOccurrences(of: "/home/you", with: home)
        }

        var relay: Process?
        var waiting: (process: Process, output: Pipe, step: Step)?
        let view = "pwalk\(getpid())"
        defer {
            if let relay, relay.isRunning { relay.terminate() }
            _ = spawn("/usr/bin/tmux", ["kill-session", "-t", view], capture: false)
        }
        var lastStatus: Int32 = 0
        for step in steps {
            let command = local(step.command)
            if command.hasPrefix("swift build") { continue }  // the programs under test are built
            if command == "permission-relay serve" {
                let (p, out) = try shell.start(command)
                relay = p
                let line = String(decoding: out.fileHandleForReading.availableData, as: UTF8.self)
                XCTAssertTrue(matches(line, local(step.expected.joined(separator: "\n"))), "serve said: \(line)")
            } else if command.hasPrefix("permission-guardian") && !command.contains(" pending") {
                // The interactive view, in a terminal of its own.
                // Not through a pipe: the tmux server it starts would hold it open.
                XCTAssertEqual(
                    spawn("/usr/bin/tmux", ["new-session", "-d", "-s", view, "-x", "100", "-y", "24", shell.line(command)], capture: false)
                        .status, 0)
                let screen = waitForScreen(view) { screen in step.expected.allSatisfy { $0.isEmpty || screen.contains($0) } }
                XCTAssertNotNil(screen, "the view shows what the README shows:\n\(step.expected.joined(separator: "\n"))")
            } else if command.contains("--wait") {
                let (p, out) = try shell.start(command)
                waiting = (p, out, step)
                XCTAssertNotNil(waitForScreen(view) { $0.contains("asks to message") }, "the question shows in the view")
                _ = spawn("/usr/bin/tmux", ["send-keys", "-t", view, "a"], capture: false)
                p.waitUntilExit()
                lastStatus = p.terminationStatus
                let said = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                XCTAssertTrue(matches(said, step.expected.joined(separator: "\n")), "\(command) said:\n\(said)")
            } else if command == "echo $?" {
                XCTAssertEqual(["\(lastStatus)"], step.expected, "the status of \(waiting?.step.command ?? "the last command")")
            } else {
                let r = shell.run(command)
                lastStatus = r.status
                XCTAssertEqual(r.status, 0, "\(command):\n\(r.output)")
                XCTAssertTrue(matches(r.output, local(step.expected.joined(separator: "\n"))), "\(command) said:\n\(r.output)")
            }
        }
        XCTAssertNotNil(relay, "the walkthrough starts a relay")
        XCTAssertNotNil(waiting, "the walkthrough has a child wait for an answer")
    }

    /// Whether `output` is what the README shows, `…` standing for any text (a token, an
    /// id); an empty expectation takes any output.
    private func matches(_ output: String, _ expected: String) -> Bool {
        guard !expected.isEmpty else { return true }
        let pattern = expected.components(separatedBy: "…").map(NSRegularExpression.escapedPattern(for:)).joined(separator: ".*")
        return output.trimmingCharacters(in: .newlines).range(of: "^" + pattern + "$", options: .regularExpression) != nil
    }

    private func waitForScreen(_ session: String, _ ok: (String) -> Bool) -> String? {
        let deadline = Date().addingTimeInterval(15)
        var last = ""
        while Date() < deadline {
            last = spawn("/usr/bin/tmux", ["capture-pane", "-p", "-t", session]).output
            if ok(last) { return last }
            usleep(50_000)  // a terminal offers no event to wait on
        }
        XCTFail("the screen never matched; last screen:\n\(last)")
        return nil
    }
}

private func shellQuoted(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "'\\''") + "'" }

/// A reader's terminal: commands run with bash in one directory, and what they export
/// stays for the next.
private final class Shell {
    let cwd: String
    private var env: [String: String]
    /// `export` lines run so far, said again before every command.
    private(set) var exports = ""

    init(cwd: String, env: [String: String]) {
        self.cwd = cwd
        self.env = env
    }

    private func bash(_ command: String) -> Process {
        process(["/bin/bash", "-c", exports + command], environment: env, directory: cwd)
    }

    /// `command` as one line for another program to run (tmux): in this directory, with
    /// this environment and the exports so far.
    func line(_ command: String) -> String {
        let assignments = env.sorted { $0.key < $1.key }.map { "\($0.key)=\(shellQuoted($0.value))" }.joined(separator: " ")
        return "cd \(shellQuoted(cwd)) && env -i \(assignments) /bin/bash -c \(shellQuoted(exports + command))"
    }

    /// Runs `command` to its end: its status and output (stdout and stderr).
    func run(_ command: String) -> (status: Int32, output: String) {
        if command.hasPrefix("export ") { exports += command + "\n" }
        return runToEnd(bash(command))
    }

    /// Starts `command` in the background; its output (stdout and stderr) comes through the pipe.
    func start(_ command: String) throws -> (Process, Pipe) {
        let p = bash(command)
        let out = Pipe()
        p.standardOutput = out
        p.standardError = out
        try p.run()
        return (p, out)
    }
}
