// What the core keeps per member and per family, each in one object: a request finds
// everything about its sender through its session, and an event its recipients through
// the family, instead of looking the same id up in a map per fact (a frame used to
// hash member ids some twenty times).

import RelayProtocol
import RelayModel

/// One member of a family and all the state the rules keep for it.
final class Member {
    var record: MemberRecord
    let family: Family
    /// The seq of the last event appended to its stream.
    var head: Int64 = 0
    /// The store keeps the events after this seq, up to the head, and none before
    /// (wire contract §6: the oldest go first, once every durable session acknowledged
    /// them or once they are older than the retention window).
    var prunedThrough: Int64 = 0
    /// Its durable sessions, by name.
    var sessions: [String: DurableSession] = [:]
    /// Its connections with an established session.
    var live: [Connection] = []

    // A child's questions and contacts (empty for a guardian).
    /// The ids of its questions the core holds (`RelayCore.questions`).
    var held: Set<QuestionID> = []
    var pendingQuestions = 0
    var known: [NormalizedHandle: KnownHandleRecord] = [:]
    var askBucket: TokenBucket?

    init(_ record: MemberRecord, family: Family) {
        self.record = record
        self.family = family
    }

    var id: String { record.id }
    var isRemoved: Bool { record.removed }

    func isKnown(_ h: NormalizedHandle, at now: Timestamp) -> Bool { known[h]?.isKnown(at: now) ?? false }
}

/// A family's current (not removed) members.
final class Family {
    let id: String
    var guardians: [Member] = []
    var children: [Member] = []

    init(id: String) { self.id = id }
}

/// A durable session's stored record, shared by the connection that has it open: an ack
/// moves the cursor here and marks it for the next turn's write.
final class DurableSession {
    var record: SessionRecord
    var dirty = false
    /// When it was last opened or closed, in `RelayCore.sessionUses`; 0 for none since start.
    var lastUse: Int64 = 0

    init(_ record: SessionRecord) { self.record = record }
}
