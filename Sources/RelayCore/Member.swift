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
    /// Where restores made its stream jump: no event has a seq after a point's `through`
    /// up to its `head`.
    var restorePoints: [RestorePoint] = []
    /// Its durable sessions, by name.
    var sessions: [String: DurableSession] = [:]
    /// Its connections with an established session.
    var live: [Connection] = []

    // A child's questions and contacts (empty for a guardian).
    /// The ids of its questions the core holds (`RelayCore.questions`).
    var held: Set<QuestionID> = []
    var pendingQuestions = 0
    /// The size of its pending questions (their JSON), as the relay holds them.
    var pendingBytes = 0
    var known: [NormalizedHandle: KnownHandle] = [:]
    var askBucket: TokenBucket?

    init(_ record: MemberRecord, family: Family) {
        self.record = record
        self.family = family
    }

    var id: String { record.id }

    /// The seq of the event after `seq` in its stream: the next, or past a restore's jump.
    func seq(after seq: Int64) -> Int64 {
        (restorePoints.first { $0.through == seq }?.head ?? seq) + 1
    }

    /// Counts `q` among its pending questions, or no longer.
    func pendingAdded(_ q: QuestionRecord) {
        pendingQuestions += 1
        pendingBytes += q.content.encoded.count
    }
    func pendingEnded(_ q: QuestionRecord) {
        pendingQuestions -= 1
        pendingBytes -= q.content.encoded.count
    }
    var isRemoved: Bool { record.removed }

    func isKnown(_ h: NormalizedHandle, at now: Timestamp) -> Bool { known[h]?.isKnown(at: now) ?? false }
}

/// A child's known handle as `Member.known` holds it. The child and the handle, which the
/// rest of a `KnownHandleRecord` holds, are that table's owner and key: not stored again
/// in each of what may be very many entries; `record(child:handle:)` rebuilds the record.
struct KnownHandle: Equatable {
    var row: Int64
    var until: Timestamp?
    var permanent: Bool
    /// Actions approved with it, kept for history; usually one of a few lists, shared
    /// (`RelayCore.sharedActions`).
    var actions: [String]

    /// `r` with `actions` in place of its own list (the same, shared).
    init(_ r: KnownHandleRecord, sharing actions: [String]) {
        (row, until, permanent, self.actions) = (r.row, r.until, r.permanent, actions)
    }

    init(row: Int64) {
        (self.row, until, permanent, actions) = (row, nil, false, [])
    }

    func isKnown(at now: Timestamp) -> Bool { permanent || (until.map { $0 > now } ?? false) }

    func record(child: Member, handle: NormalizedHandle) -> KnownHandleRecord {
        KnownHandleRecord(row: row, child: child.id, handle: handle, permanent: permanent, until: until, actions: actions)
    }
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
