// The harness's handle on one actor process: commands out, replies and events in,
// waited for with deadlines (a reader thread fills an inbox guarded by a condition).

import Foundation
import RelayProtocol

final class ActorProcess: @unchecked Sendable {
    let name: String
    let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private let condition = NSCondition()
    private var inbox: [JSONObject] = []
    private var ended = false
    private var next = 1

    /// `environment` is added to the harness's own (a token goes there, out of the process list).
    init(name: String, executable: URL, arguments: [String], environment: [String: String] = [:]) throws {
        self.name = name
        process.executableURL = executable
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        let handle = output.fileHandleForReading
        Thread { [self] in
            var buffer = Data()
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                buffer.append(chunk)
                while let nl = buffer.firstIndex(of: 10) {
                    let line = buffer[buffer.startIndex..<nl]
                    buffer.removeSubrange(buffer.startIndex...nl)
                    if let o = try? JSON.parse(Array(line)).object {
                        condition.lock()
                        inbox.append(o)
                        condition.broadcast()
                        condition.unlock()
                    }
                }
            }
            condition.lock()
            ended = true
            condition.broadcast()
            condition.unlock()
        }.start()
    }

    /// Waits for the first inbox entry matching `match` (removing it), up to `timeout`.
    func take(timeout: Double, _ match: (JSONObject) -> Bool) -> JSONObject? {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while true {
            if let i = inbox.firstIndex(where: match) { return inbox.remove(at: i) }
            if ended || !condition.wait(until: deadline) { return inbox.firstIndex(where: match).map { inbox.remove(at: $0) } }
        }
    }

    /// What is in the inbox now that matches (not removed), for failure messages.
    func peek(_ match: (JSONObject) -> Bool) -> [JSONObject] {
        condition.lock()
        defer { condition.unlock() }
        return inbox.filter(match)
    }

    /// Sends a command; returns the number its reply will carry.
    func send(_ cmd: JSONObject) -> Int {
        var c = cmd
        let n = next
        next += 1
        c["n"] = .int(Int64(n))
        input.fileHandleForWriting.write(Data((JSON.object(c).text + "\n").utf8))
        return n
    }

    /// Waits for the reply to the command numbered `n`.
    func reply(to n: Int, timeout: Double) -> JSONObject? { take(timeout: timeout) { $0["reply"]?.int == Int64(n) } }

    /// Closes stdin (the actor records what it processed and exits) and waits.
    func stop() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }

    func kill() {
        if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}
