// The benchmark runs end to end: every cycle completes against the relay and the
// baseline (speed itself is measured by scripts/bench.sh, not asserted here).

import Foundation
import RelayProtocol
import RelayServer
import XCTest

final class BenchTests: XCTestCase {
    /// Runs one point with `options` and checks that both the relay and the other server (the
    /// baseline, or the relay compared) completed cycles without errors or losses; returns the
    /// point's JSON line.
    @discardableResult
    private func runCleanly(_ options: [String], relay: String = "relay", other: String = "baseline") throws -> JSON {
        let p = try ProgramRun("permission-bench", options + ["--duration", "0.5", "--warmup", "0.1", "--json"], env: [:])
        let line = try JSON.parse(p.nextLine() ?? "")
        XCTAssertEqual(p.finish(), 0)
        for side in [relay, other] {
            XCTAssertGreaterThan(line[side]?["cycles"]?.int ?? 0, 0, side)
            XCTAssertEqual(line[side]?["errors"]?.int, 0, side)
            XCTAssertEqual(line[side]?["lost"]?.int, 0, "\(side): every question answered, every response matched")
            XCTAssertNotNil(line[side]?["p99Micros"]?.number, side)
            // Every frame is a system call or two on each side, so some of the CPU time is the kernel's.
            let share = line[side]?["serverSystemShare"]?.number ?? -1
            XCTAssertTrue(share > 0 && share <= 1, "\(side): system share \(share)")
        }
        XCTAssertNotNil(line["ratio"]?.number)
        return line
    }

    func testASmallGridPointCompletesEveryCycleInEveryRun() throws {
        let line = try runCleanly(["--families", "3", "--window", "2", "--runs", "2"])
        XCTAssertEqual(line["runs"]?.int, 2, "the figures are the medians of two runs")
        XCTAssertNil(line["relay"]?["partsMicros"], "a cycle's parts are timed only for a trace")
    }

    /// Children on one relay, guardians on another, linked through a real hub: every cycle
    /// crosses it twice, and is measured against one relay in the same run.
    func testTheCrossDevicePointCompletesEveryCycleThroughTheHub() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/nats-server") else {
            throw XCTSkip("nats-server is not installed (apt-get install nats-server; .ci/run installs it)")
        }
        let line = try runCleanly(
            ["--cross-device", "--families", "3", "--window", "2", "--runs", "2"], relay: "devices", other: "oneRelay")
        XCTAssertEqual(line["runs"]?.int, 2)
    }

    /// Every guardian gets each question and exactly one answers it: a second answer would
    /// come back as an error, no answer as a lost cycle.
    func testWithSeveralGuardiansEachQuestionIsAnsweredOnce() throws {
        let line = try runCleanly(["--families", "2", "--window", "3", "--guardians", "3"])
        XCTAssertEqual(line["guardians"]?.int, 3)
    }

    /// The baseline links a family's child and guardian by their hellos and moves each
    /// frame to the other side; replying, it first answers the sender with an `ok`, as the
    /// relay answers each ask and answer.
    func testTheReplyingBaselineAnswersEachFrameItMovesWithAnOkToItsSender() throws {
        for replying in [false, true] {
            let socket = FileManager.default.temporaryDirectory.appendingPathComponent("fwd-\(UUID().uuidString.prefix(8))").path
            let forwarder = try ProgramRun(
                "permission-bench", ["forward", "--socket", socket] + (replying ? ["--replying"] : []), env: [:])
            defer {
                forwarder.process.terminate()
                forwarder.process.waitUntilExit()
                unlink(socket)
            }
            XCTAssertNotNil(forwarder.nextLine(containing: "forwarding"))
            let child = try BlockingConnection(path: socket), guardian = try BlockingConnection(path: socket)
            for (c, member) in [(child, "c7r"), (guardian, "g7r")] {
                c.setTimeout(seconds: 10)
                try c.send(["type": "hello", "id": "h", "protocol": 1, "member": .string(member)])
                XCTAssertEqual(try c.receive()?["type"]?.string, "welcome")
            }
            // Each side waits for what the other sent, so what reaches each comes in one order.
            for (from, to, type) in [(child, guardian, "ask"), (guardian, child, "answer")] {
                try from.send(["type": .string(type), "id": "1"])
                if replying { XCTAssertEqual(try from.receive()?["type"]?.string, "ok", "the \(type)'s sender is answered") }
                XCTAssertEqual(try to.receive()?["type"]?.string, type, "replying: \(replying)")
            }
        }
        let line = try runCleanly(["--families", "2", "--window", "2", "--baseline", "replying"])
        XCTAssertEqual(line["baselineReplying"]?.bool, true)
        for bad in [["--baseline", "loud"], ["--baseline", "replying", "--compare", relayBinary]] {
            XCTAssertEqual(try ProgramRun("permission-bench", bad, env: [:]).finish(), 64, "\(bad)")
        }
    }

    /// Run from PATH in another directory (argv[0] a bare name), it finds the relay beside itself.
    func testTheBenchmarkRunFromPathFindsTheRelayBesideItself() throws {
        let elsewhere = FileManager.default.temporaryDirectory.appendingPathComponent("bench-cwd-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: elsewhere, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: elsewhere) }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = [
            "PATH=\(productsDirectory.path):/usr/bin:/bin", "permission-bench", "--families", "1", "--window", "1", "--duration", "0.3",
            "--warmup", "0", "--json",
        ]
        p.currentDirectoryURL = elsewhere
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        let stop = killAfter(p, seconds: 60)
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        stop.cancel()
        XCTAssertEqual(p.terminationStatus, 0, text)
        XCTAssertGreaterThan(try JSON.parse(text)["relay"]?["cycles"]?.int ?? 0, 0, text)
    }

    /// A mistyped command, or a time the run cannot have, is a usage error before anything runs.
    func testWrongArgumentsAreRefusedBeforeAnyRun() throws {
        let short = ["--families", "1", "--window", "1", "--duration", "0.2", "--warmup", "0"]
        for bad in [["bogus"] + short, short + ["--duration", "0"], short + ["--duration", "1e20"], short + ["--every", "0"]] {
            let run = try ProgramRun("permission-bench", bad, env: [:], stderrInLines: true)
            XCTAssertEqual(run.finish(), 64, "\(bad)")
            while run.nextLine() != nil {}
            XCTAssertEqual(run.lines.count, 1, "\(bad): \(run.lines)")
            XCTAssertNil(run.lines.first { $0.contains("measuring") }, "\(bad): \(run.lines)")
        }
    }

    /// `--compare` runs another relay binary in the baseline's place, run for run, and says
    /// so; a path that is not an executable is a usage error before anything starts.
    func testAnotherRelayBuildIsMeasuredInTheBaselinesPlace() throws {
        let line = try runCleanly(["--families", "2", "--window", "2", "--runs", "2", "--compare", relayBinary], other: "compared")
        XCTAssertNil(line["baseline"], "the relay compared takes the baseline's place")
        XCTAssertEqual(line["runs"]?.int, 2)
        for path in ["/no/such/relay", productsDirectory.path] {
            let refused = Process()
            refused.executableURL = productsDirectory.appendingPathComponent("permission-bench")
            refused.arguments = ["--families", "1", "--window", "1", "--compare", path]
            let err = Pipe()
            refused.standardError = err
            try refused.run()
            let said = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            refused.waitUntilExit()
            XCTAssertEqual(refused.terminationStatus, 64, path)
            XCTAssertTrue(said.contains("--compare: no executable at \(path)"), said)
        }
    }

    /// A running relay is measured too, its CPU and memory found through the socket's peer,
    /// and again: every run provisions families of its own and asks new questions.
    func testARunningRelayIsMeasuredWithItsCPUAndMemoryRunAfterRun() throws {
        let relay = try RelayProcess(flags: ["--ask-rate-limit", "0", "--max-pending-per-child", "0"])
        try relay.start()
        defer { _ = relay.terminate() }
        let p = try ProgramRun(
            "permission-bench",
            [
                "--socket", relay.socket, "--families", "2", "--window", "2", "--guardians", "2", "--runs", "2", "--duration", "0.5",
                "--warmup", "0.1", "--json",
            ],
            env: [:])
        let line = try JSON.parse(p.nextLine() ?? "")
        XCTAssertEqual(p.finish(), 0)
        XCTAssertNil(line["baseline"], "no baseline against a running relay")
        XCTAssertEqual(line["relay"]?["errors"]?.int, 0, "the second run's families and questions are its own")
        XCTAssertGreaterThan(line["relay"]?["cycles"]?.int ?? 0, 0)
        XCTAssertEqual(line["relay"]?["lost"]?.int, 0)
        XCTAssertGreaterThan(line["relay"]?["serverCPUMicrosPerCycle"]?.number ?? 0, 0)
        XCTAssertGreaterThan(line["relay"]?["serverRSSBytes"]?.int ?? 0, 0)
    }

    /// `--trace` writes one row per measured cycle of each server, in the order they completed.
    /// With two guardians, so that the parts are timed at the one that answers.
    func testATraceHoldsEveryMeasuredCycleInOrderWithItsParts() throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("trace-\(UUID().uuidString).csv").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        let line = try runCleanly(["--families", "2", "--window", "2", "--guardians", "2", "--trace", file])
        let rows = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n")
        XCTAssertEqual(rows.first, "point,server,run,completedAtMicros,latencyMicros,toGuardianMicros,atGuardianMicros,toChildMicros")
        for server in ["relay", "baseline"] {
            let mine = rows.dropFirst().map { $0.split(separator: ",", omittingEmptySubsequences: false) }.filter {
                $0.count == 10 && $0[3] == server
            }
            XCTAssertEqual(mine.count, line[server]?["cycles"]?.int.map(Int.init), "\(server): a row per cycle")
            let times = mine.compactMap { Int($0[5]) }, latencies = mine.compactMap { Int($0[6]) }
            XCTAssertEqual(times, times.sorted(), "\(server): in the order they completed")
            XCTAssertTrue(times.allSatisfy { $0 >= 0 && $0 < 1_000_000 }, "\(server): within the measured half second and its last turn")
            XCTAssertEqual(latencies.count, mine.count)
            XCTAssertTrue(
                mine.allSatisfy { $0[0] == "\"(2" && $0[1] == " 2" && $0[2] == " 2)\"" && $0[4] == "1" }, "\(server): point and run")
            for row in mine {
                // Each part is truncated to whole µs, as the latency is: their sum falls short of it by under 3 µs.
                let parts = row[7...].compactMap { Int($0) }, latency = Int(row[6]) ?? -1
                XCTAssertEqual(parts.count, 3, "\(server): every part timed in \(row)")
                XCTAssertTrue(parts.allSatisfy { $0 >= 0 } && (latency - 2...latency).contains(parts.reduce(0, +)), "\(server): \(row)")
            }
            // The summary's percentiles of each part are those of the rows (one run: no medians over runs).
            for (column, part) in [(7, "toGuardian"), (8, "atGuardian"), (9, "toChild")] {
                let values = mine.compactMap { Int($0[column]) }.sorted()
                for (name, p) in [("p50", 0.5), ("p99", 0.99)] {
                    let summary = line[server]?["partsMicros"]?[part]?[name]?.number
                    XCTAssertEqual(
                        summary.map(Int.init), values.isEmpty ? nil : values[Int(Double(values.count) * p)], "\(server) \(part) \(name)")
                }
            }
        }
    }

    /// `--every` prints a line for each stretch of the measured time, for the relay and the
    /// baseline alike, whose cycles add up to the run's.
    func testEveryStretchOfALongRunHasALineOfItsOwn() throws {
        let p = try ProgramRun(
            "permission-bench", ["--families", "2", "--window", "2", "--duration", "1", "--warmup", "0.1", "--every", "0.5", "--json"],
            env: [:], stderrInLines: true)
        var stretches: [String] = []
        var summary: JSON?
        while let line = p.nextLine() {
            if line.contains(" at ") && line.contains(" s: ") { stretches.append(line) }
            if line.hasPrefix("{") { summary = try JSON.parse(line) }
        }
        XCTAssertEqual(p.finish(), 0)
        XCTAssertEqual(
            stretches.map { $0.split(separator: ":")[0] },
            ["  relay at 0.5 s", "  relay at 1 s", "  baseline at 0.5 s", "  baseline at 1 s"], "\(stretches)")
        XCTAssertTrue(stretches.allSatisfy { $0.contains("× p50") && $0.contains("RSS") }, "\(stretches)")
        let rates = stretches.prefix(2).compactMap { Int($0.split(separator: " ")[4]) }
        let cycles = summary?["relay"]?["cycles"]?.int.map(Int.init) ?? -1
        XCTAssertEqual(rates.count, 2)
        XCTAssertEqual(rates.reduce(0, +) / 2, cycles, "\(rates) per second in two half seconds against \(cycles) cycles in all")
    }

    func testTheCoreAloneCompletesEveryCycle() throws {
        let p = try ProgramRun("permission-bench", ["core", "--families", "3", "--window", "2", "--rounds", "4", "--json"], env: [:])
        let line = try JSON.parse(p.nextLine() ?? "")
        XCTAssertEqual(p.finish(), 0)
        XCTAssertEqual(line["cycles"]?.int, 24)
        XCTAssertEqual(line["errors"]?.int, 0)
        XCTAssertEqual(line["lost"]?.int, 0, "every question answered, every response sent to its child")
        XCTAssertGreaterThan(line["cpuMicrosPerCycle"]?.number ?? 0, 0)
        XCTAssertEqual(line["questionsKeptByFirstChild"]?.int, 8, "every question remembered below the limit")
    }

    /// With a lower limit the later rounds measure a relay that forgets questions as it runs.
    func testTheCoreAloneCanRunAtTheQuestionLimit() throws {
        let p = try ProgramRun(
            "permission-bench", ["core", "--families", "2", "--window", "2", "--rounds", "4", "--max-questions-per-child", "3", "--json"],
            env: [:])
        let line = try JSON.parse(p.nextLine() ?? "")
        XCTAssertEqual(p.finish(), 0)
        XCTAssertEqual(line["cycles"]?.int, 16)
        XCTAssertEqual(line["errors"]?.int, 0)
        XCTAssertEqual(line["lost"]?.int, 0)
        XCTAssertEqual(line["questionsKeptByFirstChild"]?.int, 3)
        let refused = try ProgramRun("permission-bench", ["core", "--max-questions-per-child", "0"], env: [:])
        XCTAssertEqual(refused.finish(), 64)
    }
}

final class BenchSignalTests: XCTestCase {
    /// The pids of running (not dead) processes whose parent is `parent`.
    private func children(of parent: Int32) -> [Int32] {
        let pids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc"))?.compactMap { Int32($0) } ?? []
        return pids.filter { pid in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return false }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 2 && fields[0] != "Z" && Int32(fields[1]) == parent
        }
    }

    private func isAlive(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return false }
        return stat[stat.index(after: close)...].split(separator: " ").first != "Z"
    }

    /// Waits (polling /proc, which offers nothing to wait on) until `done` holds or 20 s pass.
    private func eventually(_ done: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            if done() { return true }
            usleep(20_000)
        }
        return done()
    }

    func testABenchmarkStoppedBySIGTERMStopsItsRelay() throws {
        let bench = try ProgramRun(
            "permission-bench", ["--families", "1", "--window", "1", "--duration", "60", "--warmup", "0"], env: [:])
        let pid = bench.process.processIdentifier
        var servers: [Int32] = []
        XCTAssertTrue(
            eventually {
                servers = children(of: pid); return !servers.isEmpty
            }, "the benchmark started its relay")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("permission-bench-\(pid)-1-1").path
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir), "the run's directory is \(dir)")
        kill(pid, SIGTERM)
        XCTAssertEqual(bench.finish(), 128 + SIGTERM, "it stopped on the signal, having stopped its servers first")
        for server in servers {
            XCTAssertTrue(eventually { !isAlive(server) }, "server \(server) still runs after its benchmark stopped")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir), "the run's directory (and the relay's store) is left in \(dir)")
    }
}

final class BenchExtrasTests: XCTestCase {
    func testIdleMemoryAndStartupFiguresAreProduced() throws {
        let idle = try ProgramRun("permission-bench", ["idle", "--connections", "200", "--json"], env: [:])
        let i = try JSON.parse(idle.nextLine() ?? "")
        XCTAssertEqual(idle.finish(), 0)
        XCTAssertEqual(i["connections"]?.int, 200)
        XCTAssertNotNil(i["relayBytesPerIdleConnection"]?.number)

        let startup = try ProgramRun(
            "permission-bench", ["startup", "--events", "3000", "--pending", "300", "--answered", "900", "--children", "7", "--json"],
            env: [:])
        let s = try JSON.parse(startup.nextLine() ?? "")
        XCTAssertEqual(startup.finish(), 0)
        XCTAssertGreaterThan(s["startupSeconds"]?.number ?? 0, 0)
        XCTAssertEqual(s["answered"]?.int, 900)
        XCTAssertGreaterThan(s["rssBytes"]?.int ?? 0, 1 << 20)
    }
}
