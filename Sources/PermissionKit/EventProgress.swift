// Which events of the member's stream this app has processed, kept in a small state
// file (written atomically: temp file, then rename) so that a restarted app neither
// loses nor repeats an event. Processing may skip ahead of an event that waits for a
// consumer; the file keeps the mark (everything up to it is processed) and the seqs done
// above it, the topics this app registered (its durable session's subscription only ever
// grows, so a later run never filters out a response an earlier run asked for), and
// whether it ever asked for outcomes (then they wait for it, as responses do).
//
// A stream has holes: events of topics the session does not follow are never sent, and a
// replay after `gap` starts past events that were dropped. A connection delivers its
// events in order with no hole after the first (§6), so a seq below the highest received
// that never came will not come: the mark passes it once everything received below it is
// processed.
//
// The file also keeps the questions asked here whose response (or closing) this app has
// not processed, and whether a gap may have taken some of those: `AskCenter` then asks
// the relay how they stand.

import Foundation
import RelayProtocol
import Synchronization

final class EventProgress: Sendable {
    private struct State {
        var mark: Int64?
        var above: Set<Int64>
        var topics: Set<String>
        var outcomes: Bool
        /// Questions asked here whose response or closing is not processed yet, oldest first.
        var awaiting: [String]
        /// A gap may have dropped the response or closing of one of `awaiting`.
        var unsure: Bool
        /// Questions asked again while the closing of their last asking was in hand, with
        /// that closing's seq: processing that one leaves the new asking awaited.
        var askedAgain: [String: Int64]
        /// Gaps (and resets) seen in this run: a check begun before the last one is not the last word.
        var gaps = 0
        /// Received in this run and not processed yet.
        var open: Set<Int64> = []
        /// Received in this run from a stream the relay no longer has (its data reset, or a
        /// backup restored below them) and not processed yet: the relay gives those seqs to
        /// new events, so processing one of these moves nothing.
        var stale: Set<Int64> = []
        /// The highest seq received in this run.
        var highest: Int64?
        /// The center closed: the file is left as it was then (see `seal`).
        var sealed = false
    }

    private let path: String?
    private let state: Mutex<State>

    init(path: String?) {
        self.path = path
        var mark: Int64?
        var above: Set<Int64> = []
        var topics: Set<String> = []
        var outcomes = false
        var awaiting: [String] = []
        var unsure = false
        var askedAgain: [String: Int64] = [:]
        if let path, let data = FileManager.default.contents(atPath: path), let j = try? JSON.parse(Array(data)) {
            mark = j["seq"]?.int
            above = Set((j["above"]?.array ?? []).compactMap(\.int))
            topics = Set((j["topics"]?.array ?? []).compactMap(\.string))
            outcomes = j["outcomes"]?.bool ?? false
            awaiting = (j["awaiting"]?.array ?? []).compactMap(\.string)
            unsure = j["unsure"]?.bool ?? false
            // A closing recovered in an earlier run (a seq below 1), or one a gap passed (up to
            // the mark), is not in hand in this one.
            for f in j["askedAgain"]?.object?.fields ?? [] {
                if let seq = f.value.int, seq > (mark ?? 0) { askedAgain[f.key] = seq }
            }
        }
        state = Mutex(
            State(mark: mark, above: above, topics: topics, outcomes: outcomes, awaiting: awaiting, unsure: unsure, askedAgain: askedAgain))
    }

    /// The most questions whose closing is awaited: past it, the oldest are no longer
    /// followed (the relay holds far fewer pending per child).
    static let maxAwaited = 1024

    /// The questions asked here whose response or closing is not processed yet.
    var awaiting: [String] { state.withLock { $0.awaiting } }

    /// Whether a gap may have taken the closing of a question in `awaiting`.
    var unsure: Bool { state.withLock { $0.unsure } }

    /// The gaps (and resets) this run has seen, for `checked`.
    var gaps: Int { state.withLock { $0.gaps } }

    /// Notes a question about to be asked here: its response or closing is awaited.
    func awaitClosing(of question: String) {
        state.withLock { s in
            guard !s.awaiting.contains(question) else { return }
            s.awaiting.append(question)
            s.awaiting.removeFirst(max(0, s.awaiting.count - Self.maxAwaited))
            save(s)
        }
    }

    /// A question asked that the relay did not take, or that is not pending: not awaited.
    func stopAwaiting(_ question: String) {
        state.withLock { s in
            guard let i = s.awaiting.firstIndex(of: question) else { return }
            s.awaiting.remove(at: i)
            save(s)
        }
    }

    /// `question` is asked again while the closing of its last asking, `seq`, is in hand.
    func askedAgain(_ question: String, closingInHand seq: Int64) {
        state.withLock { s in
            s.askedAgain[question] = seq
            save(s)
        }
    }

    /// That ask again failed: while the closing in hand is still to be processed, it is
    /// awaited as before; once processed, the question is not awaited any more.
    func undoAskAgain(_ question: String, closingInHand seq: Int64) {
        state.withLock { s in
            if s.askedAgain[question] == seq {
                s.askedAgain[question] = nil
            } else {
                s.awaiting.removeAll { $0 == question }
            }
            save(s)
        }
    }

    /// The relay was asked, after `gaps` gaps, how the awaited questions stand: those it no
    /// longer has are not awaited any more; `sure` when every awaited one that finished has
    /// had its closing processed. Unsure still after a later gap.
    func checked(gone: Set<String>, sure: Bool, gaps: Int) {
        state.withLock { s in
            s.awaiting.removeAll { gone.contains($0) }
            s.unsure = !s.awaiting.isEmpty && (!sure || s.gaps != gaps)
            save(s)
        }
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

    /// A welcome says where the stream resumes: a client without a mark starts there (and
    /// keeps it, so that it resumes from there even where the relay forgot the session), and
    /// a mark beyond the relay's head (a relay whose data was reset) starts over too, and
    /// seqs processed beyond the head are of events the relay no longer has (its store
    /// replaced): the seqs it gives next are new events. After `gap`, the events up to the
    /// cursor are gone: there is nothing left to wait for below it.
    func welcome(head: Int64, cursor: Int64, gap: Bool) {
        state.withLock { s in
            if s.mark == nil || s.mark! > head {
                s.stale.formUnion(s.open)
                (s.mark, s.above, s.open, s.highest) = (cursor, [], [], nil)
                if !s.awaiting.isEmpty {  // a relay whose data was reset: what it has is to be seen
                    s.unsure = true
                    s.gaps += 1
                }
                s.askedAgain = [:]
                save(s)  // a run that processes nothing still resumes from here if the relay forgets the session
                return
            }
            if (s.highest ?? 0) > head || s.above.contains(where: { $0 > head }) {
                s.above = s.above.filter { $0 <= head }
                s.stale.formUnion(s.open.filter { $0 > head })
                s.askedAgain = s.askedAgain.filter { $0.value <= head }  // as at a reset: those closings are stale
                s.open = s.open.filter { $0 <= head }
                s.highest = s.highest.map { min($0, head) }
                save(s)
            }
            if gap, let mark = s.mark, cursor > mark {
                // Closings dropped never come; those in hand are still to be processed.
                s.askedAgain = s.askedAgain.filter { $0.value > cursor || $0.value < 1 || s.open.contains($0.value) }
                s.mark = cursor
                s.above = s.above.filter { $0 > cursor }
                s.open = s.open.filter { $0 > cursor }
                if !s.awaiting.isEmpty {
                    s.unsure = true
                    s.gaps += 1
                }
                save(s)
            }
        }
    }

    /// An ephemeral session's stream starts at the head at every connection: what came
    /// between two connections is not for it.
    func restart(at head: Int64) {
        state.withLock { s in
            (s.mark, s.above, s.highest) = (head, [], head)
            s.open = s.open.filter { $0 > head }
        }
    }

    /// Notes that `seq` came on the connection (before it is handed on).
    func received(_ seq: Int64) {
        state.withLock { s in
            s.highest = max(s.highest ?? seq, seq)
            if !((s.mark.map { seq <= $0 } ?? false) || s.above.contains(seq)) { s.open.insert(seq) }
        }
    }

    /// Whether an event with `seq` from before the relay's reset is still to be processed.
    func isStale(_ seq: Int64) -> Bool { state.withLock { $0.stale.contains(seq) } }

    /// The event with `seq` from before the relay's reset is no longer in hand.
    func forgetStale(_ seq: Int64) { state.withLock { _ = $0.stale.remove(seq) } }

    func isDone(_ seq: Int64) -> Bool {
        state.withLock { s in (s.mark.map { seq <= $0 } ?? false) || s.above.contains(seq) }
    }

    /// Records `seq` as processed, and with it the closing of `question` (no longer
    /// awaited); returns the mark when it moved (to ack it): up to the first seq received and
    /// not processed yet, or to the highest received when there is none (what did not come
    /// below it will not). A seq below 1 is of a closing recovered after a gap, not of the stream.
    @discardableResult
    func markDone(_ seq: Int64, closing question: String? = nil) -> Int64? {
        state.withLock { s in
            var changed = false
            if let q = question {
                if s.askedAgain[q] == seq {
                    s.askedAgain[q] = nil  // the last asking's: the new one stays awaited
                    changed = true
                } else if let i = s.awaiting.firstIndex(of: q) {
                    s.awaiting.remove(at: i)
                    changed = true
                }
            }
            let before = s.mark ?? (seq - 1)
            // Of the stream before a reset (`AskCenter` hands the new stream's event with that
            // seq only once the old one is processed): it moves nothing.
            let stale = s.stale.remove(seq) != nil
            if !stale { s.open.remove(seq) }
            guard seq > before, seq > 0, !stale else {
                if changed { save(s) }
                return nil
            }
            s.above.insert(seq)
            let highest = max(s.highest ?? seq, seq)
            var mark = max(before, s.open.min().map { $0 - 1 } ?? highest)  // all open ones are above the mark
            s.above = s.above.filter { $0 > mark }
            while s.above.remove(mark + 1) != nil { mark += 1 }  // done in an earlier run
            s.mark = mark
            save(s)
            return mark > before ? mark : nil
        }
    }

    /// Writes nothing more: the center closed. What is processed after its close (a loop of
    /// another task done later, a check of the relay still under way) is handed again at the
    /// next start, and a center made after the close on the same file (the app's next copy,
    /// which may take its session as soon as it is let go) is not overwritten by this one.
    func seal() { state.withLock { $0.sealed = true } }

    /// Writes the state to the file; called with the state's lock held, so that the file goes
    /// through the states in their order (snapshots written after the lock was let go could
    /// land out of order, the last one written an older mark: a restarted app was then shown
    /// a response again).
    private func save(_ s: State) {
        guard let path, !s.sealed else { return }
        var o: JSONObject = [
            "above": .array(s.above.sorted().map { .int($0) }), "topics": .array(s.topics.sorted().map { .string($0) }),
        ]
        if let mark = s.mark { o["seq"] = .int(mark) }
        if s.outcomes { o["outcomes"] = true }
        if !s.awaiting.isEmpty { o["awaiting"] = .array(s.awaiting.map { .string($0) }) }
        if s.unsure { o["unsure"] = true }
        let again = s.askedAgain.filter { s.awaiting.contains($0.key) }  // of questions still awaited
        if !again.isEmpty {
            o["askedAgain"] = .object(JSONObject(again.sorted { $0.key < $1.key }.map { JSONObject.Field($0.key, .int($0.value)) }))
        }
        let j: JSON = .object(o)
        let dir = (path as NSString).deletingLastPathComponent
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let tmp = path + ".tmp"
        guard FileManager.default.createFile(atPath: tmp, contents: Data(j.encoded), attributes: [.posixPermissions: 0o600]) else { return }
        _ = rename(tmp, path)
    }
}
