// The load: F families (a child and G guardians each), every child keeping W questions
// in flight; a cycle is ask → question at the guardians → answer (by one of them, in
// turn) → response at the child, with acks as the client library sends them (with the
// next frame, or alone after its ack delay). One epoll loop drives every connection;
// frames are classified by byte search, not parsed, so the generator stays cheap.

import CSystem
import Foundation
import Glibc
import RelayProtocol
import RelayServer

/// Where a cycle's time went: ask sent → question read by the guardian that answers it
/// (the relay's first hop, and the generator's wait to read it); question read → answer
/// written (the guardian's turn in the generator); answer written → response read by the
/// child (the relay's second hop).
struct CycleParts {
    var toGuardian, atGuardian, toChild: Double

    /// The parts in that order, each with its name in the JSON output (and, with `Micros`
    /// after it, in the trace's columns).
    static let fields: [(name: String, path: KeyPath<CycleParts, Double> & Sendable)] = [
        ("toGuardian", \.toGuardian), ("atGuardian", \.atGuardian), ("toChild", \.toChild),
    ]

    init(toGuardian: Double, atGuardian: Double, toChild: Double) {
        (self.toGuardian, self.atGuardian, self.toChild) = (toGuardian, atGuardian, toChild)
    }

    /// The parts from a value for each of `fields`, in their order.
    init(_ values: [Double]) { self.init(toGuardian: values[0], atGuardian: values[1], toChild: values[2]) }
}

struct LoadResult {
    var cycles = 0
    var seconds = 0.0
    var latenciesMicros: [Double] = []
    /// When each of those cycles completed, in µs since the measured time began.
    var completedAtMicros: [Double] = []
    /// Each of those cycles in its three parts, in µs, when `LoadGenerator.timesParts`.
    var partsMicros: [CycleParts] = []
    var errors = 0
    /// Questions that never got their response.
    var lost = 0
    var generatorCPUSeconds = 0.0
}

final class LoadGenerator {
    let socket: String
    /// Where the guardians connect: `socket`, or another device's relay linked to the
    /// same hub (the cross-device point).
    let guardianSocket: String
    let families: Int
    let window: Int
    let guardians: Int
    let baseline: Bool

    private let loop = EventLoop()
    /// By descriptor (descriptors are small numbers): each child connection's family, -1
    /// for the others.
    private var familyOfChild: [Int] = []
    /// By descriptor: each guardian connection's place in its family (question n is
    /// answered by guardian n mod G), -1 for the others.
    private var guardianIndex: [Int] = []
    private var childFD: [Int32] = []
    /// When each question in flight was sent (its ask written), by its number.
    private var sentAt: [Int: UInt64] = [:]
    /// Whether each cycle's parts are timed (`LoadResult.partsMicros`): two more clock
    /// readings and table entries a cycle, so only when they are asked for.
    var timesParts = false
    /// With `timesParts`, when the answering guardian read each question in flight, and
    /// when its answer was written, by number.
    private var questionReadAt: [Int: UInt64] = [:], answerSentAt: [Int: UInt64] = [:]
    /// By descriptor: the answers queued in this turn and not yet written (with `timesParts`).
    private var unsentAnswers: [[Int]] = []
    /// By descriptor: the asks queued in this turn and not yet written (`flush` times them).
    private var unsent: [[Int]] = []
    /// The acks not yet sent, held for a frame to carry them (`RelayConfiguration.ackDelay`'s
    /// default, as the client library does).
    private var acks = HeldAcks(delay: UInt64(RelayDefaults.ackDelay / .nanoseconds(1)))
    /// By descriptor: whether this turn queued a frame (an ask or an answer) to write.
    private var writes: [Bool] = []
    /// The connections that read a question or a response in this turn, each once (`isTouched`, by descriptor).
    private var touched: [Int32] = []
    private var isTouched: [Bool] = []
    private var counter = 0
    private let frames: BenchFrames
    /// Family and member names end in the run's tag, so that runs against the same relay
    /// provision their own.
    private let name: String
    /// The server's pid, from the first connection's peer credentials.
    private(set) var serverPID: Int32?

    init(
        socket: String, guardianSocket: String? = nil, families: Int, window: Int, guardians: Int = 1, avatarBytes: Int, baseline: Bool
    ) {
        self.socket = socket
        self.guardianSocket = guardianSocket ?? socket
        self.families = families
        self.window = window
        self.guardians = guardians
        self.baseline = baseline
        frames = BenchFrames(avatarBytes: avatarBytes, run: Int.random(in: 0..<(1 << 28)))
        name = "x" + String(frames.run, radix: 16)
    }

    /// The family's members: the child, then the guardians (the first is `gF…`, the others `gF…-K`).
    private func members(of f: Int) -> [String] {
        ["c\(f)\(name)"] + (0..<guardians).map { $0 == 0 ? "g\(f)\(name)" : "g\(f)\(name)-\($0)" }
    }

    /// Connects and says hello for every family (provisioning them on each relay, with
    /// the same ids on both devices).
    func connect() throws {
        var tokens: [String: [String: String]] = [:]  // by socket, then member
        for relay in Set([socket, guardianSocket]) where !baseline {
            let admin = try BlockingConnection(path: relay)
            _ = try admin.request(["type": "hello", "protocol": 1, "admin": true])
            for f in 0..<families {
                _ = try admin.request(["type": "createFamily", "family": .string("b\(f)\(name)")])
                for m in members(of: f) {
                    let role = m.hasPrefix("c") ? "child" : "guardian"
                    tokens[relay, default: [:]][m] = try admin.request([
                        "type": "addMember", "family": .string("b\(f)\(name)"), "member": .string(m), "role": .string(role),
                    ])["token"]?.string
                }
            }
        }
        for f in 0..<families {
            for (k, member) in members(of: f).enumerated() {
                let relay = member.hasPrefix("c") ? socket : guardianSocket
                let fd = cs_connect_unix(relay)
                guard fd >= 0 else { throw ServerError("cannot connect to \(relay)") }
                if serverPID == nil, case let p = cs_peer_pid(fd), p > 0 { serverPID = Int32(p) }
                var hello: JSONObject = ["type": "hello", "id": "h", "protocol": 1, "member": .string(member), "session": "bench"]
                hello["token"] = tokens[relay]?[member].map(JSON.string)
                loop.add(fd)
                loop.queue(fd, hello.frame)
                makeRoom(for: fd)
                if member.hasPrefix("c") {
                    if !baseline { loop.queue(fd, (["type": "subscribe", "id": "s", "topics": ["communication"]] as JSONObject).frame) }
                    familyOfChild[Int(fd)] = f
                    childFD.append(fd)
                } else {
                    guardianIndex[Int(fd)] = k - 1
                }
                loop.flush(fd)
            }
        }
        // Wait for every welcome (and the subscribe replies).
        var pending = families * (1 + guardians + (baseline ? 0 : 1))
        while pending > 0 {
            guard
                loop.poll(
                    timeoutMs: 10_000,
                    onFrame: { _, body in
                        if find(#""type":"welcome""#, in: body) != nil || find(#""re":"s""#, in: body) != nil {
                            pending -= 1
                        }
                    })
            else { throw ServerError("a connection failed during hello") }
        }
    }

    /// Makes room for `fd` in the tables kept by descriptor.
    private func makeRoom(for fd: Int32) {
        let n = Int(fd) + 1 - familyOfChild.count
        guard n > 0 else { return }
        familyOfChild += repeatElement(-1, count: n)
        guardianIndex += repeatElement(-1, count: n)
        acks.makeRoom(for: fd)
        writes += repeatElement(false, count: n)
        isTouched += repeatElement(false, count: n)
        unsent += repeatElement([], count: n)
        unsentAnswers += repeatElement([], count: n)
    }

    private func ask(_ fd: Int32) {
        counter += 1
        let number = counter, family = familyOfChild[Int(fd)]
        loop.queueFrame(fd) { frames.appendAsk(family: family, number: number, to: &$0) }
        unsent[Int(fd)].append(number)
        writes[Int(fd)] = true
    }

    /// Writes what is queued for `fd`, its asks (and answers, when parts are timed) timed
    /// from now: a cycle starts when its ask is sent, not when the turn queued it (the turn
    /// goes on to read and handle other connections' frames first, a wait that one client
    /// on its own would not have).
    private func flush(_ fd: Int32) {
        let slot = Int(fd)
        if !unsent[slot].isEmpty || !unsentAnswers[slot].isEmpty {
            let t = now()
            for n in unsent[slot] { sentAt[n] = t }
            for n in unsentAnswers[slot] { answerSentAt[n] = t }
            unsent[slot].removeAll(keepingCapacity: true)
            unsentAnswers[slot].removeAll(keepingCapacity: true)
        }
        loop.flush(fd)
    }

    /// Runs for `warmup` + `duration` seconds and measures the latter; with `every`, hands
    /// `onInterval` the latencies (µs) of the cycles each such stretch of it completed.
    func run(
        duration: Double, warmup: Double, every: Double? = nil,
        onInterval: (_ seconds: Double, _ latencies: ArraySlice<Double>) -> Void = { _, _ in },
        onMeasureStart: () -> Void = {}
    ) -> LoadResult {
        var result = LoadResult()
        for fd in childFD {
            for _ in 0..<window { ask(fd) }
            flush(fd)
        }
        let measureFrom = now() + UInt64(warmup * 1e9)
        let end = measureFrom + UInt64(duration * 1e9)
        var cpuAtStart = 0.0
        var measuring = false
        let interval = every.map { UInt64($0 * 1e9) }
        var intervalEnd = measureFrom + (interval ?? .max / 2)
        var intervalFrom = 0
        while true {
            let t = now()
            if !measuring && t >= measureFrom {
                measuring = true
                cpuAtStart = processCPUSeconds()
                onMeasureStart()
            }
            if let interval, t >= intervalEnd {
                onInterval(Double(intervalEnd - measureFrom) / 1e9, result.latenciesMicros[intervalFrom...])
                intervalFrom = result.latenciesMicros.count
                intervalEnd += interval
            }
            if t >= end { break }
            let ok = step(reask: true, errors: &result.errors) { latency, at, parts in
                guard measuring else { return }
                result.cycles += 1
                result.latenciesMicros.append(Double(latency) / 1000)
                result.completedAtMicros.append(Double(at - measureFrom) / 1000)
                if let parts { result.partsMicros.append(parts) }
            }
            if !ok { result.errors += 1 }
        }
        result.seconds = duration
        result.generatorCPUSeconds = processCPUSeconds() - cpuAtStart
        return result
    }

    /// Lets the questions in flight finish without asking more; returns how many never did.
    func drain(timeout: Double) -> Int {
        let deadline = now() + UInt64(timeout * 1e9)
        var errors = 0
        while !sentAt.isEmpty && now() < deadline {
            _ = step(reask: false, errors: &errors) { _, _, _ in }
        }
        return sentAt.count
    }

    private static let questionID: StaticString = #""question":{"id":""#, questionIdField: StaticString = #""questionId":""#

    /// One loop turn: guardians answer questions, children take responses (and ask again
    /// when `reask`), and every connection acks the highest seq it read as the client library
    /// does: with the next frame it sends, or on its own once `ackDelay` has passed since the
    /// first event it leaves unacknowledged. `completed` gets each cycle's latency and the
    /// time it completed, in nanoseconds, and its parts when they are timed.
    private func step(
        reask: Bool, errors: inout Int, completed: (_ latency: UInt64, _ at: UInt64, _ parts: CycleParts?) -> Void
    ) -> Bool {
        var failed = 0
        let ok = loop.poll(timeoutMs: acks.waitMilliseconds(at: now(), longest: 100)) { fd, body in
            let slot = Int(fd)
            guard let head = BenchFrames.Head(body) else { return }
            if !baseline, let seq = head.seq { acks.read(seq, on: fd, at: now()) }
            let isChild = familyOfChild[slot] >= 0
            let wanted = isChild ? head.is("response") || head.is("answer") : head.is("question") || head.is("ask")
            guard wanted else {
                if head.is("error") { failed += 1 }
                return
            }
            let idAt =
                find(Self.questionID, in: body, from: head.end).map { $0 + Self.questionID.utf8CodeUnitCount }
                ?? find(Self.questionIdField, in: body, from: head.end).map { $0 + Self.questionIdField.utf8CodeUnitCount }
            guard let idAt, idAt + 36 <= body.count else {
                failed += 1
                return
            }
            let id = UnsafeBufferPointer(rebasing: body[idAt..<(idAt + 36)])
            if isChild {
                guard let n = BenchFrames.number(inID: id), let sent = sentAt.removeValue(forKey: n) else { return }
                let at = now()
                var parts: CycleParts?
                if timesParts {
                    // Unknown (not a number) for a part whose times are missing: none should be.
                    let read = questionReadAt.removeValue(forKey: n), answered = answerSentAt.removeValue(forKey: n)
                    func micros(_ from: UInt64?, _ to: UInt64?) -> Double {
                        guard let from, let to, to >= from else { return .nan }
                        return Double(to - from) / 1000
                    }
                    parts = CycleParts(toGuardian: micros(sent, read), atGuardian: micros(read, answered), toChild: micros(answered, at))
                }
                completed(at - sent, at, parts)
                if reask { ask(fd) }
            } else {
                guard let n = BenchFrames.number(inID: id) else {
                    failed += 1
                    return
                }
                guard n % guardians == guardianIndex[slot] else { return }  // another guardian's turn
                if timesParts {
                    questionReadAt[n] = now()
                    unsentAnswers[slot].append(n)
                }
                loop.queueFrame(fd) { BenchFrames.appendAnswer(id: id, to: &$0) }
                writes[slot] = true
            }
            touch(fd)
        }
        errors += failed
        for fd in touched {
            let slot = Int(fd)
            if writes[slot], let ack = acks.take(fd) { loop.queueFrame(fd) { BenchFrames.appendAck(ack, to: &$0) } }
            writes[slot] = false
            isTouched[slot] = false
            flush(fd)
        }
        touched.removeAll(keepingCapacity: true)
        acks.takeDue(at: now()) { fd, ack in
            loop.queueFrame(fd) { BenchFrames.appendAck(ack, to: &$0) }
            flush(fd)
        }
        return ok
    }

    private func touch(_ fd: Int32) {
        guard !isTouched[Int(fd)] else { return }
        isTouched[Int(fd)] = true
        touched.append(fd)
    }
}

/// Nanoseconds on the monotonic clock, as the bench counts them.
func now() -> UInt64 { UInt64(monotonicNanos()) }

func processCPUSeconds() -> Double {
    var u = rusage()
    getrusage(RUSAGE_SELF.rawValue, &u)
    return Double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + Double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6
}
