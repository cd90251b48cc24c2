// permission-bench: the relay against a baseline forwarder on the same machinery, in
// the same run, over a grid of (families, questions in flight). The ratio is what to
// track: absolute figures move by more than half from run to run on small machines.

import CLISupport
import Foundation
import RelayProtocol
import RelayStore

let usage = """
    OVERVIEW: Measure the relay's cycles per second and latency against a baseline forwarder.

    USAGE: permission-bench [options]
           permission-bench idle [--connections N]
           permission-bench startup [--events N] [--pending N] [--answered N] [--children N]
           permission-bench core [--families F] [--window W] [--rounds N] [--sync normal|full]
                                 [--max-questions-per-child N]

    A cycle is ask → question at the guardians → answer (by one of them, in turn) → response
    at the child. Each grid point runs the relay (a fresh data directory) and then the
    baseline — a forwarder that moves the same frames along the same hops without parsing
    or storing them, and waits for events as the relay does by default — and prints both,
    and their ratio.

    OPTIONS:
      --grid standard|quick      standard: (F,W) = (1,1) (100,1) (100,8) (1000,1); quick: (1,1) (10,2)
      --families F --window W    One point instead of a grid
      --guardians G              Guardians per family (default 1): all get each question, one answers
      --duration SECONDS         Measured time of each run, the relay's and the baseline's
                                 apart, at each point (default 5)
      --warmup SECONDS           Unmeasured time before it (default 1)
      --every SECONDS            Also print, on stderr, each such stretch of the measured time:
                                 its cycles/s, p50 and p99 and the relay's memory (a long run's
                                 drift: scripts/bench.sh --long runs (100, 8) for 10 minutes)
      --runs N                   Measure each point N times, relay and baseline side by side,
                                 and print the medians (default 1)
      --avatar-bytes N           Avatar image size in each question (default 0)
      --sync normal|full         The relay's durability mode (default normal)
      --socket PATH              Measure a running relay instead of starting one (no baseline;
                                 each run provisions families of its own)
      --baseline plain|replying  replying: the baseline also answers each frame it moves with
                                 a short ok to its sender, as the relay answers each ask and
                                 answer: the limit for a cycle's four deliveries (default plain)
      --compare PATH             Measure another build's relay (its permission-relay) in place
                                 of the baseline, each run's order alternating; the ratio is
                                 this relay's rate over that one's (scripts/compare.sh builds
                                 a git revision and runs this)
      --cross-device             Measure a family on two devices: the children on one relay,
                                 the guardians on another, linked through a hub (nats-server
                                 -js on a loopback port), against one relay in the same run
                                 (the server's CPU and RSS: both relays and the hub)
      --json                     One JSON object per grid point
      --svg FILE                 Also draw the latency distributions of every run
      --trace FILE               Also write every measured cycle as a CSV row: point, server,
                                 run, when it completed (µs into the measured time), latency
                                 and its parts (µs): ask sent → question read by the guardian,
                                 → answer sent, → response read by the child; a tail that
                                 comes in bursts shows there as stalls. The table then adds
                                 each part's p50 and p99 (JSON: partsMicros)

    COLUMNS: cycles/s completed in the measured time; cycle latency (ask sent → response
    received) at p50, p90, p99 and its max, in µs; cpu µs: the server's CPU time (user +
    system, all threads) per cycle; sys %: the part of it spent in the kernel; gen µs: the
    load generator's CPU per cycle; RSS MiB: the server's resident memory at the end;
    err/lost: failed cycles and questions never answered (both must be 0).

    idle: relay memory per idle authenticated session (RSS growth over N sessions, default 10000).
    startup: time until a relay listens over a store prefilled with N retained events
    (default 1000000), N pending questions (default 100000) and N answered ones (default 0),
    spread over N children (default: one per 100 pending questions); and its memory then.
    core: the relay's core and store driven in-process, without sockets, for N rounds of W
    cycles per family (defaults: F 100, W 8, N 10); prints their CPU per cycle. Under
    valgrind --tool=callgrind its instruction counts repeat from run to run. With
    --max-questions-per-child below N×W, later rounds measure a relay at that limit,
    which forgets each child's oldest finished questions in its pruning passes.
      -h, --help                 Show this help.
      --version                  Print the version.

    EXAMPLES:
      permission-bench
      permission-bench --families 100 --window 8 --duration 10
      permission-bench --families 100 --window 1 --guardians 3
      permission-bench --runs 3
      permission-bench --grid quick --json --svg latency.svg
      permission-bench --families 100 --window 1 --trace cycles.csv
      permission-bench --families 100 --window 1 --runs 5 --compare /tmp/main/permission-relay
      permission-bench idle --connections 10000
      permission-bench startup
      permission-bench startup --children 10000 --answered 10000000 --pending 10000 --events 0
      valgrind --tool=callgrind permission-bench core --families 100 --window 8 --rounds 10
    """

struct Point {
    let families: Int
    let window: Int
    var guardians = 1

    /// "(F, W)", or "(F, W, G)" with more than one guardian per family.
    var label: String { guardians == 1 ? "(\(families), \(window))" : "(\(families), \(window), \(guardians))" }
    /// "(F, W) = (…)", or "(F, W, G) = (…)".
    var heading: String { "(F, W\(guardians == 1 ? "" : ", G")) = \(label)" }
}

struct Figures {
    var result: LoadResult
    var serverCPU: ProcessCPU
    var serverRSSBytes: Int
    var cyclesPerSecond: Double { Double(result.cycles) / result.seconds }
    var sorted: [Double] { result.latenciesMicros.sorted() }
    var cpuPerCycleMicros: Double { result.cycles == 0 ? .nan : serverCPU.total / Double(result.cycles) * 1e6 }
    var generatorPerCycleMicros: Double { result.cycles == 0 ? .nan : result.generatorCPUSeconds / Double(result.cycles) * 1e6 }
}

/// A run's figures as plain numbers, or the medians of several runs' figures.
struct Summary {
    var cyclesPerSecond, p50, p90, p99, max, serverCPUPerCycle, generatorCPUPerCycle: Double
    /// The part of the server's CPU time spent in the kernel, 0 to 1.
    var serverSystemShare: Double
    var serverRSSBytes: Int
    var errors, lost, cycles: Int
    /// The cycles' parts at p50 and p99, when they were timed (`--trace`).
    var partsP50, partsP99: CycleParts?

    init(_ f: Figures) {
        let s = f.sorted
        func at(_ p: Double) -> Double { Self.percentile(p, ofSorted: s) }
        cyclesPerSecond = f.cyclesPerSecond
        (p50, p90, p99, max) = (at(0.5), at(0.9), at(0.99), s.last ?? .nan)
        serverCPUPerCycle = f.cpuPerCycleMicros
        serverSystemShare = f.serverCPU.total > 0 ? f.serverCPU.system / f.serverCPU.total : .nan
        generatorCPUPerCycle = f.generatorPerCycleMicros
        serverRSSBytes = f.serverRSSBytes
        (errors, lost, cycles) = (f.result.errors, f.result.lost, f.result.cycles)
        let parts = f.result.partsMicros
        if !parts.isEmpty {
            let sorted = CycleParts.fields.map { f in parts.map { $0[keyPath: f.path] }.sorted() }
            func at(_ p: Double) -> CycleParts { CycleParts(sorted.map { Self.percentile(p, ofSorted: $0) }) }
            (partsP50, partsP99) = (at(0.5), at(0.99))
        }
    }

    /// The value below which the fraction `p` of `sorted` lies.
    static func percentile(_ p: Double, ofSorted sorted: [Double]) -> Double {
        sorted.isEmpty ? .nan : sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.down)))]
    }

    /// Each figure's median over `runs`; errors, losses and cycles are totals.
    init(medianOf runs: [Summary]) {
        self = runs[0]
        cyclesPerSecond = median(runs.map(\.cyclesPerSecond))
        p50 = median(runs.map(\.p50))
        p90 = median(runs.map(\.p90))
        p99 = median(runs.map(\.p99))
        max = median(runs.map(\.max))
        serverCPUPerCycle = median(runs.map(\.serverCPUPerCycle))
        serverSystemShare = median(runs.map(\.serverSystemShare))
        generatorCPUPerCycle = median(runs.map(\.generatorCPUPerCycle))
        serverRSSBytes = Int(median(runs.map { Double($0.serverRSSBytes) }))
        (errors, lost, cycles) = runs.reduce((0, 0, 0)) { ($0.0 + $1.errors, $0.1 + $1.lost, $0.2 + $1.cycles) }
        func medianParts(_ all: [CycleParts]) -> CycleParts? {
            guard all.count == runs.count else { return nil }
            return CycleParts(CycleParts.fields.map { f in median(all.map { $0[keyPath: f.path] }) })
        }
        partsP50 = medianParts(runs.compactMap(\.partsP50))
        partsP99 = medianParts(runs.compactMap(\.partsP99))
    }
}

/// The middle value (the mean of the two middle ones for an even count).
func median(_ values: [Double]) -> Double {
    let s = values.sorted()
    guard !s.isEmpty else { return .nan }
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}

/// `others`: more processes whose CPU and memory count as the server's (the other
/// device's relay and the hub, for the cross-device point, whose guardians connect to
/// `guardianSocket`).
func measure(
    _ point: Point, socket: String, guardianSocket: String? = nil, pid: Int32?, others: [Int32] = [], baseline: Bool, a: Arguments
) throws -> Figures {
    let gen = LoadGenerator(
        socket: socket, guardianSocket: guardianSocket, families: point.families, window: point.window, guardians: point.guardians,
        avatarBytes: try a.int("--avatar-bytes", default: 0), baseline: baseline)
    gen.timesParts = a.value("--trace") != nil
    try gen.connect()
    let pid = pid ?? gen.serverPID  // a running relay (--socket) is found by its socket's peer credentials
    var cpuStart = ProcessCPU(user: 0, system: 0)
    let every = a.value("--every") != nil ? try a.seconds("--every", default: 60, min: 0.1) : nil
    // A stretch's figures are worked out on another thread, in order: sorting a minute of
    // latencies on the generator's would stall every cycle in flight, and show as the
    // relay's tail (copying them there takes a few milliseconds).
    let intervalReports = DispatchQueue(label: "stretch figures")
    var result = gen.run(
        duration: try a.seconds("--duration", default: 5, min: 0.1), warmup: try a.seconds("--warmup", default: 1), every: every,
        onInterval: { at, latencies in
            guard let every else { return }
            let name = baseline ? "baseline" : "relay"
            let rss = pid.map { " · RSS \(([$0] + others).map(rssBytes).reduce(0, +) >> 20) MiB" } ?? ""
            let stretch = Array(latencies)
            intervalReports.async {
                guard !stretch.isEmpty else { return printErr("  \(name) at \(String(format: "%g", at)) s: no cycles") }
                let sorted = stretch.sorted()
                let p50 = Summary.percentile(0.5, ofSorted: sorted), p99 = Summary.percentile(0.99, ofSorted: sorted)
                printErr(
                    "  \(name) at \(String(format: "%g", at)) s: \(Int(Double(sorted.count) / every)) cycles/s"
                        + " · p50 \(Int(p50)) µs · p99 \(Int(p99)) µs (\(String(format: "%.1f", p50 > 0 ? p99 / p50 : 0))× p50)\(rss)")
            }
        }
    ) {
        if let pid { cpuStart = ProcessCPU(pids: [pid] + others) }
    }
    intervalReports.sync {}
    // Unknown, not zero, when no server process is found.
    let cpu = pid.map { ProcessCPU(pids: [$0] + others) - cpuStart } ?? ProcessCPU(user: .nan, system: .nan)
    let rss = pid.map { ([$0] + others).map(rssBytes).reduce(0, +) } ?? 0
    result.lost = gen.drain(timeout: 10)
    return Figures(result: result, serverCPU: cpu, serverRSSBytes: rss)
}

/// Measures the relay at one point, then the baseline forwarder, or the relay at `compared`
/// (first in every other run, so that a machine that speeds up or slows down within a run
/// favors neither).
func runPoint(_ point: Point, _ a: Arguments, run: Int, compared: String?) throws -> (relay: Figures, other: Figures?) {
    if let socket = a.value("--socket") {
        return (try measure(point, socket: socket, pid: nil, baseline: false, a: a), nil)
    }
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent(
        "permission-bench-\(getpid())-\(point.families)-\(point.window)")
    try Servers.makeDirectory(dir)
    defer { Servers.removeDirectory(dir) }
    func measureRelay(_ executable: String, _ name: String) throws -> Figures {
        let socket = dir.appendingPathComponent("\(name).sock").path
        let relay = try startServer(
            executable,
            [
                "serve", "--socket", socket, "--data", dir.appendingPathComponent("\(name)-data").path,
                "--ask-rate-limit", "0", "--max-pending-per-child", "0", "--max-connections", "100000",
                "--sync", a.value("--sync") ?? "normal",
            ], readyWord: "listening")
        defer { Servers.stop(relay) }
        return try measure(point, socket: socket, pid: relay.processIdentifier, baseline: false, a: a)
    }
    if a.has("--cross-device") {
        func twoDevices() throws -> Figures {
            let hubDirectory = dir.appendingPathComponent("hub")
            let port = try freeLoopbackPort()
            let hub = try startServer(
                try natsServer(), ["-js", "-a", "127.0.0.1", "-p", "\(port)", "-sd", hubDirectory.path], readyWord: "Server is ready",
                onStderr: true)
            defer { Servers.stop(hub) }
            var relays: [Process] = []
            defer { relays.forEach(Servers.stop) }
            for device in ["tablet", "laptop"] {
                relays.append(
                    try startServer(
                        "permission-relay",
                        [
                            "serve", "--socket", dir.appendingPathComponent("\(device).sock").path, "--data",
                            dir.appendingPathComponent("\(device)-data").path, "--ask-rate-limit", "0", "--max-pending-per-child", "0",
                            "--max-connections", "100000", "--sync", a.value("--sync") ?? "normal", "--hub", "nats://127.0.0.1:\(port)",
                            "--device", device,
                        ], readyWord: "listening"))
            }
            return try measure(
                point, socket: dir.appendingPathComponent("tablet.sock").path,
                guardianSocket: dir.appendingPathComponent("laptop.sock").path,
                pid: relays[0].processIdentifier, others: [relays[1].processIdentifier, hub.processIdentifier], baseline: false, a: a)
        }
        if run % 2 == 0 {
            let one = try measureRelay("permission-relay", "r")
            return (try twoDevices(), one)
        }
        let two = try twoDevices()
        return (two, try measureRelay("permission-relay", "r"))
    }
    if let other = compared {
        if run % 2 == 0 {
            let theirs = try measureRelay(other, "compared")
            return (try measureRelay("permission-relay", "r"), theirs)
        }
        let mine = try measureRelay("permission-relay", "r")
        return (mine, try measureRelay(other, "compared"))
    }
    let relayFigures = try measureRelay("permission-relay", "r")
    let forwarder = try startServer(
        "permission-bench",
        ["forward", "--socket", dir.appendingPathComponent("b.sock").path] + (a.value("--baseline") == "replying" ? ["--replying"] : []),
        readyWord: "forwarding")
    let baseFigures = try measure(
        point, socket: dir.appendingPathComponent("b.sock").path, pid: forwarder.processIdentifier, baseline: true, a: a)
    Servers.stop(forwarder)
    return (relayFigures, baseFigures)
}

/// `--trace`: every measured cycle as a row of a CSV file, written run by run.
final class CycleTrace {
    private let file: FileHandle

    static let header =
        "point,server,run,completedAtMicros,latencyMicros" + CycleParts.fields.map { ",\($0.name)Micros" }.joined() + "\n"

    init(path: String) throws {
        file = try openForWriting(path)
        guard (try? file.write(contentsOf: Data(Self.header.utf8))) != nil else { throw CLIError.failure("cannot write \(path)") }
    }

    func write(_ point: Point, _ server: String, run: Int, _ result: LoadResult) {
        var text = ""
        for (i, (at, latency)) in zip(result.completedAtMicros, result.latenciesMicros).enumerated() {
            let parts = i < result.partsMicros.count ? result.partsMicros[i] : CycleParts(toGuardian: .nan, atGuardian: .nan, toChild: .nan)
            text += "\"\(point.label)\",\(server),\(run),\(Int(at)),\(Int(latency))"
            for f in CycleParts.fields {
                let part = parts[keyPath: f.path]
                text += part.isNaN ? "," : ",\(Int(part))"
            }
            text += "\n"
        }
        file.write(Data(text.utf8))
    }
}

func fmt(_ v: Double, _ digits: Int = 0) -> String { v.isNaN ? "-" : String(format: "%.\(digits)f", v) }

/// Prints a point's figures (medians when there were several runs), named `relayName`,
/// beside those of the baseline, or of the relay compared, named `otherName`; `ratio` is the
/// median of the runs' ratios of the relay's cycles per second to the other's.
func report(
    _ point: Point, _ r: Summary, _ b: Summary?, relayName: String = "relay", otherName: String, replying: Bool, ratio: Double?,
    runs: Int, json: Bool
) {
    if json {
        var o: JSONObject = [
            "families": .int(Int64(point.families)), "window": .int(Int64(point.window)), "guardians": .int(Int64(point.guardians)),
            "runs": .int(Int64(runs)),
        ]
        if replying { o["baselineReplying"] = true }
        for (name, f) in [(relayName, Optional(r)), (otherName, b)] {
            guard let f else { continue }
            var side: JSONObject = [
                "cyclesPerSecond": .double(f.cyclesPerSecond), "p50Micros": .double(f.p50), "p90Micros": .double(f.p90),
                "p99Micros": .double(f.p99), "maxMicros": .double(f.max), "serverCPUMicrosPerCycle": .double(f.serverCPUPerCycle),
                "serverSystemShare": .double(f.serverSystemShare),
                "generatorCPUMicrosPerCycle": .double(f.generatorCPUPerCycle), "serverRSSBytes": .int(Int64(f.serverRSSBytes)),
                "errors": .int(Int64(f.errors)), "lost": .int(Int64(f.lost)), "cycles": .int(Int64(f.cycles)),
            ]
            if let p50 = f.partsP50, let p99 = f.partsP99 {
                var parts: JSONObject = [:]
                for (name, k) in CycleParts.fields {
                    parts[name] = .object(["p50": .double(p50[keyPath: k]), "p99": .double(p99[keyPath: k])])
                }
                side["partsMicros"] = .object(parts)
            }
            // "one relay" → "oneRelay"
            let words = name.split(separator: " ")
            o[(words.prefix(1) + words.dropFirst().map { $0.prefix(1).uppercased() + $0.dropFirst() }).joined()] = .object(side)
        }
        if let ratio { o["ratio"] = .double(ratio) }
        printOut(JSON.object(o).text)
        return
    }
    func row(_ name: String, _ f: Summary) -> String {
        [
            name, fmt(f.cyclesPerSecond), fmt(f.p50), fmt(f.p90), fmt(f.p99), fmt(f.max),
            fmt(f.serverCPUPerCycle, 1), fmt(f.serverSystemShare * 100), fmt(f.generatorCPUPerCycle, 1),
            fmt(Double(f.serverRSSBytes) / 1_048_576, 1),
            "\(f.errors)/\(f.lost)",
        ].enumerated().map { i, s in
            i == 0 ? s.padding(toLength: 10, withPad: " ", startingAt: 0) : String(repeating: " ", count: max(0, 10 - s.count)) + s
        }.joined()
    }
    printOut("\n\(point.heading)\(runs > 1 ? ", medians of \(runs) runs" : "")\(replying ? ", the baseline replying" : "")")
    printOut(
        "          "
            + ["cycles/s", "p50 µs", "p90 µs", "p99 µs", "max µs", "cpu µs", "sys %", "gen µs", "RSS MiB", "err/lost"]
            .map { String(repeating: " ", count: max(0, 10 - $0.count)) + $0 }.joined())
    printOut(row(relayName, r))
    if let b, let ratio {
        printOut(row(otherName, b))
        printOut("ratio     cycles/s \(fmt(ratio * 100))% of \(otherName)'s; p50 \(fmt(r.p50 / b.p50, 2))× \(otherName)'s")
    }
    for (name, f) in [(relayName, Optional(r)), (otherName, b)] {
        guard let f, let p50 = f.partsP50, let p99 = f.partsP99 else { continue }
        func part(_ k: KeyPath<CycleParts, Double>) -> String { "\(fmt(p50[keyPath: k])) / \(fmt(p99[keyPath: k]))" }
        printOut(
            "parts     \(name), p50 / p99 µs: ask → question at the guardian \(part(\.toGuardian)); "
                + "→ answer sent \(part(\.atGuardian)); → response at the child \(part(\.toChild))")
    }
}

let signalSources = Servers.stopOnSignals()
Servers.exit(
    runMain(program: "permission-bench") {
        let args = Array(CommandLine.arguments.dropFirst())
        if args.contains("-h") || args.contains("--help") {
            printOut(usage)
            return 0
        }
        if args.first == "idle" {
            let a = try Arguments(Array(args.dropFirst()), valueFlags: ["--connections"], switchFlags: ["--json"])
            let r = try Extras.idleMemory(count: try a.int("--connections", default: 10_000, min: 1))
            printOut(
                a.has("--json")
                    ? JSON.object(["connections": .int(Int64(r.connections)), "relayBytesPerIdleConnection": .double(r.bytesPerConnection)])
                        .text
                    : "relay memory per idle session: \(fmt(r.bytesPerConnection)) bytes (\(r.connections) sessions)")
            return 0
        }
        if args.first == "startup" {
            let a = try Arguments(
                Array(args.dropFirst()), valueFlags: ["--events", "--pending", "--children", "--answered"], switchFlags: ["--json"])
            let events = try a.int("--events", default: 1_000_000), pending = try a.int("--pending", default: 100_000)
            let children = try a.value("--children").map { _ in try a.int("--children", default: 1, min: 1) }
            let answered = try a.int("--answered", default: 0)
            let what = "\(events) events, \(pending) pending and \(answered) answered questions"
            if !a.has("--json") { printErr("prefilling \(what)…") }
            let r = try Extras.startup(events: events, pending: pending, children: children, answered: answered)
            printOut(
                a.has("--json")
                    ? JSON.object([
                        "events": .int(Int64(events)), "pending": .int(Int64(pending)), "answered": .int(Int64(answered)),
                        "startupSeconds": .double(r.seconds), "rssBytes": .int(Int64(r.rssBytes)),
                    ]).text
                    : "relay start-up over \(what): \(fmt(r.seconds, 2)) s, RSS \(r.rssBytes >> 20) MiB")
            return 0
        }
        if args.first == "core" {
            let a = try Arguments(
                Array(args.dropFirst()), valueFlags: ["--families", "--window", "--rounds", "--sync", "--max-questions-per-child"],
                switchFlags: ["--json"])
            let f = try a.int("--families", default: 100, min: 1), w = try a.int("--window", default: 8, min: 1)
            let sync: SyncMode
            switch a.value("--sync") ?? "normal" {
            case "normal": sync = .normal
            case "full": sync = .full
            default: throw CLIError.usage("--sync must be normal or full")
            }
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("permission-bench-core-\(getpid())")
            try Servers.makeDirectory(dir)
            defer { Servers.removeDirectory(dir) }
            let keep = try a.int("--max-questions-per-child", default: QuestionsKept().count, min: 1)
            let r = try CoreDrive(families: f, window: w, directory: dir.path, sync: sync, maxQuestionsPerChild: keep).run(
                rounds: try a.int("--rounds", default: 10, min: 1))
            let cpu = r.cpuSeconds / Double(r.cycles) * 1e6
            printOut(
                a.has("--json")
                    ? JSON.object([
                        "families": .int(Int64(f)), "window": .int(Int64(w)), "cycles": .int(Int64(r.cycles)),
                        "cpuMicrosPerCycle": .double(cpu), "errors": .int(Int64(r.errors)), "lost": .int(Int64(r.lost)),
                        "questionsKeptByFirstChild": .int(Int64(r.keptByFirstChild)),
                    ]).text
                    : "core and store alone, (F, W) = (\(f), \(w)): \(r.cycles) cycles in \(fmt(r.seconds, 2)) s, "
                        + "\(fmt(cpu)) µs of CPU per cycle; errors \(r.errors), lost \(r.lost); "
                        + "the first child keeps \(r.keptByFirstChild) questions")
            return r.errors == 0 && r.lost == 0 ? 0 : 1
        }
        if args.first == "forward" {
            let a = try Arguments(Array(args.dropFirst()), valueFlags: ["--socket"], switchFlags: ["--replying"])
            guard let s = a.value("--socket") else { throw CLIError.usage("forward needs --socket PATH") }
            return Forwarder.run(socket: s, replying: a.has("--replying"))
        }
        let a = try Arguments(
            args,
            valueFlags: [
                "--grid", "--families", "--window", "--guardians", "--runs", "--duration", "--warmup", "--avatar-bytes", "--sync",
                "--every",
                "--socket", "--svg", "--trace", "--compare", "--baseline",
            ],
            switchFlags: ["--json", "--cross-device"])
        if let word = a.positionals.first {
            throw CLIError.usage("unknown command \"\(word)\": the commands are idle, startup and core, or none (the benchmark itself)")
        }
        // Checked before any server starts (they are read again where used).
        guard ["normal", "full"].contains(a.value("--sync") ?? "normal") else { throw CLIError.usage("--sync must be normal or full") }
        guard ["plain", "replying"].contains(a.value("--baseline") ?? "plain") else {
            throw CLIError.usage("--baseline must be plain or replying")
        }
        _ = (
            try a.int("--avatar-bytes", default: 0), try a.seconds("--duration", default: 5, min: 0.1),
            try a.seconds("--warmup", default: 1),
            try a.seconds("--every", default: 60, min: 0.1)
        )
        var points: [Point]
        if a.value("--families") != nil || a.value("--window") != nil {
            points = [Point(families: try a.int("--families", default: 1, min: 1), window: try a.int("--window", default: 1, min: 1))]
        } else {
            switch a.value("--grid") ?? "standard" {
            case "standard":
                points = [
                    Point(families: 1, window: 1), Point(families: 100, window: 1), Point(families: 100, window: 8),
                    Point(families: 1000, window: 1),
                ]
            case "quick": points = [Point(families: 1, window: 1), Point(families: 10, window: 2)]
            default: throw CLIError.usage("--grid must be standard or quick")
            }
        }
        // The relay to compare, as an absolute path: a bare name is not one beside this program.
        let compared = try a.value("--compare").map { given -> String in
            guard a.value("--socket") == nil else {
                throw CLIError.usage("--compare and --socket go separately: --compare starts both relays")
            }
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: given, isDirectory: &isDirectory), !isDirectory.boolValue,
                FileManager.default.isExecutableFile(atPath: given)
            else {
                throw CLIError.usage("--compare: no executable at \(given); give the path of another build's permission-relay")
            }
            return URL(fileURLWithPath: given).path
        }
        if a.value("--baseline") != nil && (compared != nil || a.value("--socket") != nil) {
            throw CLIError.usage("--baseline goes without --compare and --socket, which measure no baseline")
        }
        if a.has("--cross-device") && (compared != nil || a.value("--socket") != nil || a.value("--baseline") != nil) {
            throw CLIError.usage("--cross-device measures against one relay: it goes without --compare, --socket and --baseline")
        }
        if a.has("--cross-device") { _ = try natsServer() }
        let otherName = a.has("--cross-device") ? "one relay" : compared == nil ? "baseline" : "compared"
        let replying = a.value("--baseline") == "replying"
        let guardians = try a.int("--guardians", default: 1, min: 1)
        for i in points.indices { points[i].guardians = guardians }
        let runs = try a.int("--runs", default: 1, min: 1)
        var failed = false
        var series: [(label: String, micros: [Double])] = []
        let trace = try a.value("--trace").map(CycleTrace.init(path:))
        for p in points {
            var relayRuns: [Summary] = [], baseRuns: [Summary] = [], ratios: [Double] = []
            var relayMicros: [Double] = [], baseMicros: [Double] = []
            for k in 1...runs {
                if !a.has("--json") {
                    printErr("measuring \(p.heading)\(runs > 1 ? ", run \(k) of \(runs)" : "")…")
                }
                let (r, b) = try runPoint(p, a, run: k, compared: compared)
                trace?.write(p, "relay", run: k, r.result)
                if let b { trace?.write(p, otherName, run: k, b.result) }
                relayRuns.append(Summary(r))
                relayMicros += r.result.latenciesMicros
                if let b {
                    baseRuns.append(Summary(b))
                    baseMicros += b.result.latenciesMicros
                    ratios.append(r.cyclesPerSecond / b.cyclesPerSecond)
                }
            }
            let relay = Summary(medianOf: relayRuns)
            report(
                p, relay, baseRuns.isEmpty ? nil : Summary(medianOf: baseRuns), relayName: a.has("--cross-device") ? "devices" : "relay",
                otherName: otherName, replying: replying,
                ratio: ratios.isEmpty ? nil : median(ratios), runs: runs, json: a.has("--json"))
            series.append(("relay \(p.label)", relayMicros))
            if !baseMicros.isEmpty { series.append(("\(otherName) \(p.label)", baseMicros)) }
            failed = failed || relay.errors > 0 || relay.lost > 0 || relayRuns.contains { $0.cycles == 0 }
        }
        if let file = a.value("--svg") {
            try writeFile(Extras.svg(series), to: file)
        }
        return failed ? 1 : 0
    })
