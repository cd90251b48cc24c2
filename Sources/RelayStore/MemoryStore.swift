// An in-memory store for fast core tests: the same contract as the SQLite store,
// nothing durable. Changes apply at once; commit counts turns for tests.

import RelayProtocol

public final class MemoryStore: RelayStore {
    private var snapshot = StoreSnapshot()
    private var streams: [String: [EventRecord]] = [:]
    private var dirty = false
    /// How many commits carried changes.
    public private(set) var commits = 0

    public init() {}

    public func load() throws -> StoreSnapshot { snapshot }

    public func saveFamily(_ id: String) {
        if !snapshot.families.contains(id) { snapshot.families.append(id) }
        dirty = true
    }

    public func saveMember(_ member: MemberRecord) {
        snapshot.members.removeAll { $0.id == member.id }
        snapshot.members.append(member)
        dirty = true
    }

    public func saveQuestion(_ question: QuestionRecord) {
        if let i = snapshot.questions.firstIndex(where: { $0.key == question.key }) {
            snapshot.questions[i] = question
        } else {
            snapshot.questions.append(question)
        }
        snapshot.lastQuestionRow = max(snapshot.lastQuestionRow, question.row)
        dirty = true
    }

    public func saveQuestionState(_ question: QuestionRecord) { saveQuestion(question) }

    public func deleteQuestion(_ question: QuestionRecord) {
        snapshot.questions.removeAll { $0.key == question.key }
        dirty = true
    }

    public func saveKnownHandle(_ known: KnownHandleRecord) {
        deleteKnownHandle(child: known.child, handle: known.handle)
        snapshot.knownHandles.append(known)
    }

    public func deleteKnownHandle(child: String, handle: NormalizedHandle) {
        snapshot.knownHandles.removeAll { $0.child == child && $0.handle == handle }
        dirty = true
    }

    public func saveSession(_ session: SessionRecord) {
        snapshot.sessions.removeAll { $0.member == session.member && $0.name == session.name }
        snapshot.sessions.append(session)
        dirty = true
    }

    public func deleteSessions(member: String) {
        snapshot.sessions.removeAll { $0.member == member }
        dirty = true
    }

    public func deleteSession(member: String, name: String) {
        snapshot.sessions.removeAll { $0.member == member && $0.name == name }
        dirty = true
    }

    public func appendEvent(_ event: EventRecord) {
        streams[event.member, default: []].append(event)
        snapshot.heads[event.member] = max(snapshot.heads[event.member] ?? 0, event.seq)
        dirty = true
    }

    public func events(member: String, after seq: Int64, limit: Int) throws -> [EventRecord] {
        Array((streams[member] ?? []).lazy.filter { $0.seq > seq }.prefix(limit))
    }

    public func oldestEventSeq(member: String) throws -> Int64? { streams[member]?.first?.seq }

    public var hasChanges: Bool { dirty }
    public func noteCursor(member: String, session: String, cursor: Int64) {}

    public func commit() throws {
        if dirty { commits += 1 }
        dirty = false
    }

    public func discardChanges() { dirty = false }
    public func checkpoint() {}

    public func pruneEvents(olderThan cutoff: Timestamp, acknowledged upTo: [String: Int64]) throws -> Int {
        var dropped = 0
        for (member, list) in streams {
            let acked = upTo[member] ?? 0
            let kept = list.filter { $0.at >= cutoff && $0.seq > acked }
            dropped += list.count - kept.count
            streams[member] = kept
        }
        return dropped
    }
}
