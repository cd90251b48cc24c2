// The benchmark's other figures: relay memory per idle connection, start-up time over
// a large store, and an SVG chart of the latency distributions.

import CLISupport
import CSystem
import Foundation
import Glibc
import RelayProtocol
import RelayServer
import RelayModel
import RelayStore

/// A relay on a fresh temporary directory (or `data`), stopped by `stop`.
struct BenchRelay {
    let dir: URL
    let socket: String
    let process: Process

    static func start(data: String? = nil, extra: [String] = []) throws -> (BenchRelay, seconds: Double) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent(
            "permission-bench-\(getpid())-\(UUID().uuidString.prefix(6))")
        try Servers.makeDirectory(dir)
        let socket = dir.appendingPathComponent("r.sock").path
        let t0 = now()
        let p = try startServer(
            "permission-relay",
            [
                "serve", "--socket", socket, "--data", data ?? dir.appendingPathComponent("data").path, "--ask-rate-limit", "0",
                "--max-pending-per-child", "0",
            ] + extra, readyWord: "listening")
        return (BenchRelay(dir: dir, socket: socket, process: p), Double(now() - t0) / 1e9)
    }

    func stop() {
        Servers.stop(process)
        Servers.removeDirectory(dir)
    }
}

enum Extras {
    /// Opens `count` authenticated idle sessions; returns the relay's RSS growth per session.
    static func idleMemory(count: Int) throws -> (bytesPerConnection: Double, connections: Int) {
        _ = cs_raise_fd_limit()
        let (relay, _) = try BenchRelay.start(extra: ["--max-connections", "\(count + 100)"])
        defer { relay.stop() }
        let admin = try BlockingConnection(path: relay.socket)
        _ = try admin.request(["type": "hello", "protocol": 1, "admin": true])
        _ = try admin.request(["type": "createFamily", "family": "idle"])
        let token = try admin.request(["type": "addMember", "family": "idle", "member": "c0", "role": "child"])["token"]?.string ?? ""
        let before = rssBytes(pid: relay.process.processIdentifier)
        let loop = EventLoop()
        let hello = (["type": "hello", "id": "h", "protocol": 1, "member": "c0", "token": .string(token)] as JSONObject).frame
        for _ in 0..<count {
            let fd = cs_connect_unix(relay.socket)
            guard fd >= 0 else {
                throw CLIError.failure("could only open \(loop.count) connections: \(String(cString: strerror(errno)))")
            }
            loop.add(fd)
            loop.queue(fd, hello)
            loop.flush(fd)
        }
        var welcomed = 0
        while welcomed < count {
            guard loop.poll(timeoutMs: 10_000, onFrame: { _, _ in welcomed += 1 }) else { throw CLIError.failure("a connection failed") }
        }
        let after = rssBytes(pid: relay.process.processIdentifier)
        return (Double(after - before) / Double(count), count)
    }

    /// Fills a store with `events` retained events and `pending` pending questions, then
    /// times a relay's start on it (until its socket listens).
    /// Starts a relay over a prefilled store (`prefill`); returns how long it took to listen
    /// and its resident memory then.
    static func startup(events: Int, pending: Int, children: Int?, answered: Int) throws -> (seconds: Double, rssBytes: Int) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("permission-bench-prefill-\(getpid())")
        try Servers.makeDirectory(dir)
        defer { Servers.removeDirectory(dir) }
        let data = dir.appendingPathComponent("data")
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        try prefill(
            path: data.appendingPathComponent("relay.db").path, events: events, pending: pending, children: children,
            answered: answered)
        let (relay, seconds) = try BenchRelay.start(data: data.path)
        let rss = rssBytes(pid: relay.process.processIdentifier)
        relay.stop()
        return (seconds, rss)
    }

    /// Writes `children` families of one child and one guardian (default: one per 100
    /// pending questions), `pending` and `answered` questions spread over the children and
    /// `events` question events spread over the guardians, straight into the store.
    static func prefill(path: String, events: Int, pending: Int, children: Int?, answered: Int) throws {
        let store = try SQLiteStore(path: path)
        let families = max(1, children ?? pending / 100)
        let now = Timestamp(milliseconds: Int64(Date().timeIntervalSince1970 * 1000))
        func question(_ id: String) throws -> QuestionContent {
            let q: JSONObject = [
                "id": .string(id),
                "topic": .object([
                    "kind": "communication",
                    "personInformation": [.object(["handle": .object(["value": "+1 555 0100", "kind": "phoneNumber"])])],
                ]),
            ]
            return try QuestionContent.validate(q, now: now)
        }
        let content = try question("00000000-0000-4000-8000-000000000000")
        var changes: [Change] = []
        for f in 0..<families {
            changes.append(.family("p\(f)"))
            changes.append(.member(MemberRecord(id: "pc\(f)", family: "p\(f)", role: .child, tokenHash: [0])))
            changes.append(.member(MemberRecord(id: "pg\(f)", family: "p\(f)", role: .guardian, tokenHash: [0])))
        }
        let outcome = Outcome(choice: .approve, guardian: "pg0", answeredAt: now)
        for i in 0..<(answered + pending) {
            let c = try question(String(format: "%08X-0000-4000-8000-%012X", i / 100, i))
            let pending = i >= answered
            changes.append(
                .question(
                    QuestionRecord(
                        content: c, child: "pc\(i % families)", family: "p\(i % families)", status: pending ? .pending : .answered,
                        attempt: 1, createdAt: now, outcome: pending ? nil : outcome, row: Int64(i + 1))))
            if changes.count >= 10_000 {
                try store.commit(changes)
                changes.removeAll(keepingCapacity: true)
                // As a relay's pruning passes would, which also keeps the list in memory short.
                if i % 500_000 < 10_000 { try store.indexQuestions() }
            }
        }
        let frame = (["type": "question", "seq": 1, "question": .object(content.json)] as JSONObject).frame
        var seqs = [Int64](repeating: 0, count: families)
        for i in 0..<events {
            let g = i % families
            seqs[g] += 1
            changes.append(.event(EventRecord(member: "pg\(g)", seq: seqs[g], at: now, topic: nil, frame: frame)))
            if changes.count >= 20_000 {
                try store.commit(changes)
                changes.removeAll(keepingCapacity: true)
            }
        }
        try store.commit(changes)
        try store.indexQuestions()  // as a relay's pruning passes would have
        try store.checkpoint()  // as a relay leaves its store when it stops
    }

    /// Latency distributions (relay and baseline per grid point) as an SVG chart: share of
    /// cycles (y) completed within a latency (x, logarithmic).
    static func svg(_ series: [(label: String, micros: [Double])]) -> String {
        let w = 900.0, h = 500.0, left = 70.0, bottom = 50.0, top = 20.0, right = 220.0
        let all = series.flatMap(\.micros).filter { $0 > 0 }
        let lo = log10(max(1, all.min() ?? 1)), hi = log10(max(10, all.max() ?? 10))
        func x(_ v: Double) -> Double { left + (log10(max(v, 1)) - lo) / max(hi - lo, 0.001) * (w - left - right) }
        func y(_ p: Double) -> Double { h - bottom - p * (h - bottom - top) }
        let colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
        var out =
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(w))\" height=\"\(Int(h))\" font-family=\"sans-serif\" font-size=\"12\">\n"
        out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        out += "<line x1=\"\(left)\" y1=\"\(h - bottom)\" x2=\"\(w - right)\" y2=\"\(h - bottom)\" stroke=\"black\"/>\n"
        out += "<line x1=\"\(left)\" y1=\"\(top)\" x2=\"\(left)\" y2=\"\(h - bottom)\" stroke=\"black\"/>\n"
        var decade = floor(lo)
        while decade <= ceil(hi) {
            let v = pow(10, decade)
            if v >= pow(10, lo) - 1e-9 && v <= pow(10, hi) + 1e-9 {
                out +=
                    "<text x=\"\(x(v))\" y=\"\(h - bottom + 18)\" text-anchor=\"middle\">\(v >= 1000 ? "\(Int(v / 1000)) ms" : "\(Int(v)) µs")</text>\n"
            }
            decade += 1
        }
        for p in [0.0, 0.5, 0.9, 0.99, 1.0] {
            out += "<text x=\"\(left - 8)\" y=\"\(y(p) + 4)\" text-anchor=\"end\">\(Int(p * 100))%</text>\n"
        }
        out += "<text x=\"\((left + w - right) / 2)\" y=\"\(h - 10)\" text-anchor=\"middle\">cycle latency (log scale)</text>\n"
        for (i, s) in series.enumerated() {
            let sorted = s.micros.sorted()
            guard !sorted.isEmpty else { continue }
            let step = max(1, sorted.count / 400)
            var points: [String] = []
            for k in stride(from: 0, to: sorted.count, by: step) {
                points.append("\(x(sorted[k])),\(y(Double(k + 1) / Double(sorted.count)))")
            }
            points.append("\(x(sorted.last!)),\(y(1))")
            let color = colors[i % colors.count]
            out += "<polyline fill=\"none\" stroke=\"\(color)\" stroke-width=\"1.5\" points=\"\(points.joined(separator: " "))\"/>\n"
            out += "<text x=\"\(w - right + 10)\" y=\"\(top + 16 * Double(i + 1))\" fill=\"\(color)\">\(s.label)</text>\n"
        }
        return out + "</svg>\n"
    }
}
