// The store protocol: the core records changes as they happen (no I/O, no errors),
// and the reactor commits them once per loop turn (group commit), before any reply
// or event of that turn is written to a socket. Reads see uncommitted changes.

import RelayProtocol

/// Persistence for the relay's state and event streams.
public protocol RelayStore: AnyObject {
    /// Reads everything the core keeps in memory.
    func load() throws -> StoreSnapshot

    func saveFamily(_ id: String)
    func saveMember(_ member: MemberRecord)
    /// Stores a question, whole. Saved right after the event that announces it, its content
    /// may be kept once, as the copy in that event.
    func saveQuestion(_ question: QuestionRecord)
    /// Stores a question's status, attempt and outcome (its content is unchanged).
    func saveQuestionState(_ question: QuestionRecord)
    /// Forgets a question (by its row, when it has one).
    func deleteQuestion(_ question: QuestionRecord)
    func saveKnownHandle(_ known: KnownHandleRecord)
    func deleteKnownHandle(child: String, handle: NormalizedHandle)
    func saveSession(_ session: SessionRecord)
    /// An ack moved a durable session's cursor: it is saved lazily, but the store may use
    /// it at once to leave out events that every durable session has acknowledged.
    func noteCursor(member: String, session: String, cursor: Int64)
    /// Forgets every durable session of `member`.
    func deleteSessions(member: String)
    /// Forgets one durable session of `member`.
    func deleteSession(member: String, name: String)
    func appendEvent(_ event: EventRecord)

    /// Up to `limit` events of `member` with a seq above `seq`, in order.
    func events(member: String, after seq: Int64, limit: Int) throws -> [EventRecord]
    /// The lowest retained seq of `member`, or nil when none is retained.
    func oldestEventSeq(member: String) throws -> Int64?

    /// Whether changes are waiting for `commit`.
    var hasChanges: Bool { get }
    /// Makes every recorded change durable in one transaction.
    func commit() throws
    /// Forgets the changes recorded since the last commit.
    func discardChanges()
    /// Moves committed changes into their final place; work for idle moments and shutdown.
    /// What was committed is durable either way.
    func checkpoint() throws
    /// Drops events older than `cutoff` (retention), and events up to `upTo[member]`
    /// that every durable session of that member acknowledged. Returns how many.
    @discardableResult
    func pruneEvents(olderThan cutoff: Timestamp, acknowledged upTo: [String: Int64]) throws -> Int
}
