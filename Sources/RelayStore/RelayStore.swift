// The store protocol. The core never writes through it: it emits its changes (`Change`),
// and the reactor commits each loop turn's changes in one transaction before it sends
// anything of that turn (group commit, wire contract §9), and serves replays from what is
// stored. The core reads finished questions back through its `QuestionArchive` side.

import RelayModel
import RelayProtocol

/// Persistence for the relay's state and event streams. `commit`, `prune`, the questions'
/// upkeep and `finishCommits` are called by one thread at a time (the store's writer, or
/// the loop while the writer is idle), `load`, `events` and the archive's reads by the
/// loop beside it.
public protocol RelayStore: QuestionArchive, Sendable {
    /// Reads everything the core keeps in memory.
    func load() throws -> StoreSnapshot

    /// Makes `changes` durable, all or none, in order.
    func commit(_ changes: [Change]) throws

    /// Up to `limit` events of `member` with a seq above `seq`, in order, and no more once
    /// their frames come to `maxBytes` (one at least): a replay's step reads what it sends.
    /// Called from the loop while no commit is in flight (a commit that ended between the
    /// listing of new rows and the read could otherwise be missed).
    func events(member: String, after seq: Int64, limit: Int, maxBytes: Int) throws -> [EventRecord]

    /// How far the committed events' appends have come: a position in their order, for
    /// `prune`'s `settledThrough`.
    var eventPosition: Int64 { get }

    /// Drops, per member, the oldest events: those older than `cutoff` (retention), and
    /// those up to `acknowledged[member]`, which every durable session of that member has
    /// acknowledged (§6), as far as the cursors the store holds say too (so that a cursor
    /// whose commit may yet fail lets nothing go). Only ever a member's oldest events go, so
    /// what stays is contiguous. Events appended after `settledThrough` (an `eventPosition`)
    /// may be left for a later pass (the cursors that would let them go may not be stored
    /// yet). Each call does a bounded step (`limit`: events, or rows of them where a store
    /// keeps several in one); call again while it says there is `more`.
    func prune(olderThan cutoff: Timestamp, acknowledged: [String: Int64], settledThrough: Int64, limit: Int) throws -> PruneStep

    /// Does a bounded step of the store's own upkeep of its questions (SQLite: adding the
    /// newest to its lookup tables, after which they may be forgotten); returns whether
    /// more is due.
    func updateQuestionLookups() throws -> Bool

    /// Forgets the oldest finished questions of each child that holds more than
    /// `limits.count` questions, or whose questions' contents take more than `limits.bytes`,
    /// until it is within both (pending questions are never forgotten; a resend of a
    /// forgotten id is a new question). Forgets at most `limit` questions a call; returns
    /// whether more is due.
    func forgetQuestions(keeping limits: QuestionsKept, limit: Int) throws -> Bool

    /// Does what the commits so far left for once their replies may go (SQLite: the
    /// writer's own checkpoint of the WAL, when one is due); called by the thread that
    /// commits, after it has handed out a commit's outcome. What is left undone is done
    /// before the next transaction.
    func finishCommits()
}

extension RelayStore {
    public func finishCommits() {}

    /// A step of both parts of the questions' upkeep; returns whether more is due.
    public func maintainQuestions(keeping limits: QuestionsKept, limit: Int) throws -> Bool {
        let updating = try updateQuestionLookups()
        return try forgetQuestions(keeping: limits, limit: limit) || updating
    }
}

/// What a store keeps of each child's questions.
public struct QuestionsKept: Sendable, Equatable {
    /// Questions kept per child.
    public var count: Int
    /// Bytes of their contents (avatars included) kept per child.
    public var bytes: Int

    public init(count: Int = 10_000, bytes: Int = 64 << 20) {
        self.count = count
        self.bytes = bytes
    }
}

/// What one pruning step did.
public struct PruneStep: Sendable, Equatable {
    /// For each member whose events went: the seq up to which none is kept.
    public var through: [String: Int64] = [:]
    /// The step stopped at its limit: call again.
    public var more = false

    public init(through: [String: Int64] = [:], more: Bool = false) {
        self.through = through
        self.more = more
    }
}

extension RelayStore {
    /// Up to `limit` events of `member` with a seq above `seq`, in order, whatever their size.
    public func events(member: String, after seq: Int64, limit: Int) throws -> [EventRecord] {
        try events(member: member, after: seq, limit: limit, maxBytes: .max)
    }
}
