// An in-memory store for fast core and server tests: the same contract as the SQLite
// store, nothing durable. A commit is `StoreSnapshot.apply` of its changes, and every
// question is kept by row for the archive's reads.

import RelayModel
import RelayProtocol
import Synchronization

public final class MemoryStore: RelayStore, Sendable {
    private struct State {
        var snapshot = StoreSnapshot()
        var streams: [String: [EventRecord]] = [:]
        /// Every question stored, finished ones too, by row.
        var questions: [Int64: QuestionRecord] = [:]
        var commits = 0
    }

    private let state = Mutex(State())

    public init() {}

    /// How many commits carried changes.
    public var commits: Int { state.withLock { $0.commits } }

    public func load() throws -> StoreSnapshot { state.withLock { $0.snapshot } }

    public func commit(_ changes: [Change]) throws {
        guard !changes.isEmpty else { return }
        state.withLock { s in
            for c in changes {
                s.snapshot.apply(c)
                switch c {
                case .event(let e): s.streams[e.member, default: []].append(e)
                case .question(let q): s.questions[q.row] = q
                case .questionState(let q):
                    s.questions[q.row]?.status = q.status
                    s.questions[q.row]?.attempt = q.attempt
                    s.questions[q.row]?.outcome = q.outcome
                default: break
                }
            }
            s.commits += 1
        }
    }

    public func events(member: String, after seq: Int64, limit: Int, maxBytes: Int) throws -> [EventRecord] {
        var bytes = 0
        return state.withLock { s in
            Array(
                (s.streams[member] ?? []).lazy.filter { $0.seq > seq }.prefix(limit).prefix { e in
                    defer { bytes += e.frame.count }
                    return bytes < maxBytes
                })
        }
    }

    /// The memory store drops what may go whatever its position: there is no later pass to wait for.
    public var eventPosition: Int64 { 0 }

    public func prune(olderThan cutoff: Timestamp, acknowledged: [String: Int64], settledThrough: Int64, limit: Int) throws
        -> PruneStep
    {
        state.withLock { s in
            var through: [String: Int64] = [:]
            var budget = limit
            for (member, list) in s.streams where budget > 0 {
                // As far as the stored cursors say, too (see `RelayStore.prune`).
                let stored = s.snapshot.sessions.filter { $0.member == member }.map(\.acknowledged).min() ?? 0
                let upTo = min(acknowledged[member] ?? 0, stored)
                let dropped = list.prefix { ($0.at < cutoff || $0.seq <= upTo) }.prefix(budget)
                guard let last = dropped.last else { continue }
                budget -= dropped.count
                s.streams[member] = Array(list.dropFirst(dropped.count))
                s.snapshot.firstRetained[member] = s.streams[member]?.first?.seq
                through[member] = last.seq
            }
            return PruneStep(through: through, more: budget <= 0)
        }
    }

    public func question(_ id: QuestionID) throws -> QuestionRecord? {
        state.withLock { $0.questions.values.first { $0.key == id } }
    }

    public func questions(of child: String, status: QuestionStatus?, newestFirst: Bool, after: QuestionPlace?, limit: Int)
        throws -> [QuestionRecord]
    {
        let all = state.withLock { $0.questions.values.filter { $0.child == child && (status == nil || $0.status == status) } }
        let sorted = all.sorted { newestFirst ? QuestionPlace($0) > QuestionPlace($1) : QuestionPlace($0) < QuestionPlace($1) }
        guard let after else { return Array(sorted.prefix(limit)) }
        return Array(sorted.lazy.filter { newestFirst ? QuestionPlace($0) < after : QuestionPlace($0) > after }.prefix(limit))
    }

    /// The memory store has no lookup tables to keep.
    public func updateQuestionLookups() throws -> Bool { false }

    public func forgetQuestions(keeping limits: QuestionsKept, limit: Int) throws -> Bool {
        state.withLock { s in
            var budget = limit
            for child in Set(s.questions.values.map(\.child)).sorted() {
                var mine = s.questions.values.filter { $0.child == child }.sorted { QuestionPlace($0) < QuestionPlace($1) }
                var (count, bytes) = (mine.count, mine.reduce(0) { $0 + $1.content.encoded.count })
                while count > limits.count || bytes > limits.bytes, let i = mine.firstIndex(where: { $0.status != .pending }) {
                    guard budget > 0 else { return true }
                    let q = mine.remove(at: i)
                    s.questions[q.row] = nil
                    (count, bytes, budget) = (count - 1, bytes - q.content.encoded.count, budget - 1)
                }
            }
            return false
        }
    }
}
