// The relay's own work per cycle, without sockets: the core and its SQLite store
// driven in-process a turn at a time, as the reactor drives them (requests in, cursors
// flushed, one commit, outputs taken). Its CPU per cycle leaves out system calls and
// the load generator; under `valgrind --tool=callgrind` its instruction counts repeat
// from run to run, which timings on a shared machine do not.

import Foundation
import Glibc
import RelayCore
import RelayProtocol
import RelayServer
import RelayStore

struct CoreDriveResult {
    var cycles = 0
    var seconds = 0.0
    /// CPU time of the whole process while the rounds ran.
    var cpuSeconds = 0.0
    var errors = 0
    /// Questions whose response the child was not sent.
    var lost = 0
    /// How many questions the first family's child still has, by its `questions` request.
    var keptByFirstChild = 0
}

final class CoreDrive {
    private let families: Int
    private let window: Int
    private let store: SQLiteStore
    private var lastCursorFlush = Timestamp(milliseconds: 0)
    private let core: RelayCore
    private let questionsKept: QuestionsKept
    private let frames = BenchFrames(avatarBytes: 0)
    /// The highest event seq each connection has been sent, acked at its next turn.
    private var seen: [ConnectionID: Int] = [:]
    private var errors = 0
    private var responses = 0
    private var lastOK: JSON?

    private static let admin: ConnectionID = 1
    private func child(_ f: Int) -> ConnectionID { 2 + 2 * f }
    private func guardian(_ f: Int) -> ConnectionID { 3 + 2 * f }

    /// A store in `directory` with F families provisioned and their sessions open.
    init(families: Int, window: Int, directory: String, sync: SyncMode, maxQuestionsPerChild: Int) throws {
        self.families = families
        self.window = window
        store = try SQLiteStore(path: directory + "/relay.db", sync: sync)
        var config = CoreConfig()
        config.askRateLimit = 0
        config.maxPendingPerChild = 0
        questionsKept = QuestionsKept(count: maxQuestionsPerChild)
        config.relayUID = getuid()
        core = RelayCore(config: config, snapshot: try store.load(), archive: store, now: .now())

        core.connected(Self.admin, peerUID: getuid())
        try request(Self.admin, ["type": "hello", "id": "a", "protocol": 1, "admin": true])
        for f in 0..<families {
            try request(Self.admin, ["type": "createFamily", "id": "f", "family": .string("b\(f)")])
            for (conn, member, role) in [(child(f), "c\(f)", "child"), (guardian(f), "g\(f)", "guardian")] {
                try request(
                    Self.admin,
                    ["type": "addMember", "id": "m", "family": .string("b\(f)"), "member": .string(member), "role": .string(role)])
                guard let token = lastOK?["token"]?.string else { throw DriveError("addMember gave no token") }
                core.connected(conn, peerUID: getuid() &+ 1)
                try request(
                    conn,
                    ["type": "hello", "id": "h", "protocol": 1, "member": .string(member), "token": .string(token), "session": "bench"])
                if role == "child" { try request(conn, ["type": "subscribe", "id": "s", "topics": ["communication"]]) }
            }
        }
    }

    struct DriveError: Error, CustomStringConvertible {
        let description: String
        init(_ d: String) { description = d }
    }

    /// One provisioning request and its turn; the last reply is kept in `lastOK`.
    private func request(_ conn: ConnectionID, _ frame: JSONObject) throws {
        core.receive(conn, body: frame.encoded, now: .now())
        for body in turn(keeping: true) {
            let reply = try JSON.parse(body.dropFirst(4))
            if reply["type"]?.string == "error" { throw DriveError("\(frame["type"]?.string ?? "?") failed: \(reply.text)") }
            if reply["type"]?.string == "ok" || reply["type"]?.string == "welcome" { lastOK = reply }
        }
    }

    /// Flushes cursors and forgets questions past the limits when the relay would (once a
    /// second), commits, and takes the frames sent, noting seqs and errors (and returning
    /// the frames when `keeping`).
    @discardableResult
    private func turn(keeping: Bool = false) -> [[UInt8]] {
        let now = Timestamp.now()
        if now.milliseconds - lastCursorFlush.milliseconds >= 1000 {
            core.flushCursors()
            lastCursorFlush = now
            maintainQuestions()
        }
        if core.hasChanges {
            do {
                try store.commit(core.takeChanges())
                core.committed(throughTake: core.takes)
                store.finishCommits()
            } catch { errors += 1 }
        }
        var sent: [[UInt8]] = []
        core.drainOutputs { output in
            guard case .send(let conn, let bytes) = output else { return }
            bytes.withUnsafeBufferPointer { frame in
                // The body, after the frame's 4-byte header, read as the load generator reads it.
                guard frame.count > 4, let head = BenchFrames.Head(UnsafeBufferPointer(rebasing: frame[4...])) else { return }
                if let seq = head.seq { seen[conn] = max(seen[conn] ?? 0, seq) }
                if head.is("error") { errors += 1 }
                if head.is("response") { responses += 1 }
            }
            if keeping { sent.append(bytes) }
        }
        return sent
    }

    /// Runs `rounds` rounds of W cycles per family: children ack and ask (one turn), then
    /// guardians ack and answer (another), as a relay sees them under steady load.
    func run(rounds: Int) -> CoreDriveResult {
        // Every frame is made first, so the measured part is the relay's work.
        let perRound = families * window
        var asks: [[UInt8]] = [], answers: [[UInt8]] = []
        asks.reserveCapacity(rounds * perRound)
        answers.reserveCapacity(rounds * perRound)
        for r in 0..<rounds {
            for f in 0..<families {
                for w in 0..<window {
                    var id: [UInt8] = []
                    frames.appendID(family: f, number: r * window + w, to: &id)
                    asks.append(frames.ask(family: f, number: r * window + w))
                    answers.append(BenchFrames.answer(id: id))
                }
            }
        }
        let cpu0 = processCPUSeconds(), t0 = now()
        for r in 0..<rounds {
            let at = Timestamp.now()
            play(asks[(r * perRound)..<((r + 1) * perRound)], from: child, at: at)
            play(answers[(r * perRound)..<((r + 1) * perRound)], from: guardian, at: at)
        }
        do { try store.checkpoint() } catch { errors += 1 }
        let elapsed = Double(now() - t0) / 1e9, cpu = processCPUSeconds() - cpu0
        // As the relay's next pruning passes would, once the questions are in the lookup tables.
        do { try store.indexQuestions() } catch { errors += 1 }
        maintainQuestions()
        var kept = 0
        do {
            try request(child(0), ["type": "questions", "id": "q"])
            kept = lastOK?["questions"]?.array?.count ?? 0
        } catch { errors += 1 }
        return CoreDriveResult(
            cycles: rounds * perRound, seconds: elapsed, cpuSeconds: cpu, errors: errors, lost: rounds * perRound - responses,
            keptByFirstChild: kept)
    }

    /// One turn: every family's child (or guardian) acks what it was sent, then sends its
    /// W frames of `sent`.
    private func play(_ sent: ArraySlice<[UInt8]>, from member: (Int) -> ConnectionID, at: Timestamp) {
        var k = sent.startIndex
        for f in 0..<families {
            ackSeen(member(f), at)
            for _ in 0..<window {
                core.receive(member(f), body: sent[k], now: at)
                k += 1
            }
        }
        turn()
    }

    private func maintainQuestions() {
        do {
            while try store.maintainQuestions(keeping: questionsKept, limit: 1000) {}
        } catch { errors += 1 }
    }

    private func ackSeen(_ conn: ConnectionID, _ at: Timestamp) {
        if let seq = seen[conn] { core.receive(conn, body: BenchFrames.ack(seq), now: at) }
    }
}
