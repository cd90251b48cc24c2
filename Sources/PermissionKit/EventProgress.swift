// Which events of the member's stream this app has processed, kept in a small state
// file (written atomically: temp file, then rename) so that a restarted app neither
// loses nor repeats an event. Processing may skip ahead of an event that waits for a
// consumer; the file keeps the contiguous mark and the seqs done above it, the topics
// this app registered (its durable session's subscription only ever grows, so a later
// run never filters out a response an earlier run asked for), and whether it ever asked
// for outcomes (then they wait for it, as responses do).

import Foundation
import RelayProtocol
import Synchronization

final class EventProgress: Sendable {
    private let path: String?
    private let state: Mutex<(mark: Int64?, above: Set<Int64>, topics: Set<String>, outcomes: Bool)>

    init(path: String?) {
        self.path = path
        var mark: Int64?
        var above: Set<Int64> = []
        var topics: Set<String> = []
        var outcomes = false
        if let path, let data = FileManager.default.contents(atPath: path), let j = try? JSON.parse(Array(data)) {
            mark = j["seq"]?.int
            above = Set((j["above"]?.array ?? []).compactMap(\.int))
            topics = Set((j["topics"]?.array ?? []).compactMap(\.string))
            outcomes = j["outcomes"]?.bool ?? false
        }
        state = Mutex((mark, above, topics, outcomes))
    }

    /// The highest seq up to which everything is processed (for `resume` and `ack`).
    var mark: Int64? { state.withLock { $0.mark } }

    /// The topics registered so far (by asks and response consumers).
    var topics: Set<String> { state.withLock { $0.topics } }

    /// Whether this app asked for outcomes, in this run or an earlier one.
    var usesOutcomes: Bool { state.withLock { $0.outcomes } }

    func noteOutcomesUsed() {
        state.withLock { s in
            guard !s.outcomes else { return }
            s.outcomes = true
            save(s)
        }
    }

    /// Adds topics; when the set grows, `grown` gets the whole set while it is still locked
    /// (so whatever it queues precedes anything queued after this call returns).
    func register(_ new: Set<String>, grown: (Set<String>) -> Void) {
        state.withLock { s in
            let before = s.topics.count
            s.topics.formUnion(new)
            guard s.topics.count > before else { return }
            grown(s.topics)
            save(s)
        }
    }

    /// A welcome says where the stream resumes: a client without a mark starts there, and
    /// a mark beyond the relay's head (a relay whose data was reset) starts over too.
    func welcome(head: Int64, cursor: Int64) {
        state.withLock { s in
            if s.mark == nil || s.mark! > head {
                s.mark = cursor
                s.above = []
            }
        }
    }

    /// An ephemeral session's stream starts at the head at every connection: what came
    /// between two connections is not for it.
    func restart(at head: Int64) {
        state.withLock { s in
            s.mark = head
            s.above = []
        }
    }

    func isDone(_ seq: Int64) -> Bool {
        state.withLock { s in (s.mark.map { seq <= $0 } ?? false) || s.above.contains(seq) }
    }

    /// Records `seq` as processed; returns the mark when it moved (to ack it).
    @discardableResult
    func markDone(_ seq: Int64) -> Int64? {
        state.withLock { s in
            var mark = s.mark ?? (seq - 1)
            guard seq > mark else { return nil }
            s.above.insert(seq)
            let before = mark
            while s.above.remove(mark + 1) != nil { mark += 1 }
            s.mark = mark
            save(s)
            return mark > before ? mark : nil
        }
    }

    /// Writes the state to the file; called with the state's lock held, so that the file goes
    /// through the states in their order (snapshots written after the lock was let go could
    /// land out of order, the last one written an older mark: a restarted app was then shown
    /// a response again).
    private func save(_ s: (mark: Int64?, above: Set<Int64>, topics: Set<String>, outcomes: Bool)) {
        guard let path else { return }
        var o: JSONObject = [
            "above": .array(s.above.sorted().map { .int($0) }), "topics": .array(s.topics.sorted().map { .string($0) }),
        ]
        if let mark = s.mark { o["seq"] = .int(mark) }
        if s.outcomes { o["outcomes"] = true }
        let j: JSON = .object(o)
        let dir = (path as NSString).deletingLastPathComponent
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let tmp = path + ".tmp"
        guard FileManager.default.createFile(atPath: tmp, contents: Data(j.encoded), attributes: [.posixPermissions: 0o600]) else { return }
        _ = rename(tmp, path)
    }
}
