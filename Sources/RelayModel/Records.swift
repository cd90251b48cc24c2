// What the relay remembers, as plain values. The core keeps these in memory and emits
// every change to them (`Change`); the store only persists changes and reads them back.

import RelayProtocol

public struct MemberRecord: Sendable, Equatable {
    public var id: String
    public var family: String
    public var role: Role
    /// SHA-256 of the member's token; the token itself is never stored.
    public var tokenHash: [UInt8]
    /// A removed member's id stays reserved.
    public var removed: Bool
    /// Communication limits (children only).
    public var limitsEnabled: Bool
    /// The Unix account (uid) the member is bound to: a connection from it says hello as
    /// the member without a token (the family computer). At most one member per account.
    public var unixUID: UInt32?

    public init(
        id: String, family: String, role: Role, tokenHash: [UInt8], removed: Bool = false, limitsEnabled: Bool = true,
        unixUID: UInt32? = nil
    ) {
        self.id = id
        self.family = family
        self.role = role
        self.tokenHash = tokenHash
        self.removed = removed
        self.limitsEnabled = limitsEnabled
        self.unixUID = unixUID
    }
}

/// How an answered question was answered.
public struct Outcome: Sendable, Equatable {
    public var choice: Choice
    public var guardian: String
    public var answeredAt: Timestamp

    public init(choice: Choice, guardian: String, answeredAt: Timestamp) {
        self.choice = choice
        self.guardian = guardian
        self.answeredAt = answeredAt
    }
}

public struct QuestionRecord: Sendable, Equatable {
    public var content: QuestionContent
    public var child: String
    public var family: String
    public var status: QuestionStatus
    public var attempt: Int64
    /// When the question was first asked.
    public var createdAt: Timestamp
    public var outcome: Outcome?
    /// Where a store keeps the question: a number the core gives it when it is first asked,
    /// above every row the store holds or has held (`StoreSnapshot.lastQuestionRow`), and
    /// keeps while it remembers the question. 0 when unknown: the store finds the question
    /// by its id instead. Not part of what the question is (`==`).
    public var row: Int64

    public var id: String { content.id }
    public var key: QuestionID { content.key }

    public init(
        content: QuestionContent, child: String, family: String, status: QuestionStatus, attempt: Int64,
        createdAt: Timestamp, outcome: Outcome? = nil, row: Int64 = 0
    ) {
        self.content = content
        self.child = child
        self.family = family
        self.status = status
        self.attempt = attempt
        self.createdAt = createdAt
        self.outcome = outcome
        self.row = row
    }

    public static func == (a: QuestionRecord, b: QuestionRecord) -> Bool {
        a.content == b.content && a.child == b.child && a.family == b.family && a.status == b.status
            && a.attempt == b.attempt && a.createdAt == b.createdAt && a.outcome == b.outcome
    }
}

/// A handle known for a child: permanently, until an instant, or both.
public struct KnownHandleRecord: Sendable, Equatable {
    /// Where the store keeps it: given by the core when the handle becomes known, above
    /// every row held then, so that new handles are appended rather than spread through
    /// the table by child (a page written per handle).
    public var row: Int64
    public var child: String
    public var handle: NormalizedHandle
    public var permanent: Bool
    public var until: Timestamp?
    /// Actions approved with it, kept for history.
    public var actions: [String]

    public init(row: Int64, child: String, handle: NormalizedHandle, permanent: Bool, until: Timestamp?, actions: [String]) {
        self.row = row
        self.child = child
        self.handle = handle
        self.permanent = permanent
        self.until = until
        self.actions = actions
    }
}

/// A durable session: its cursor and topic subscriptions.
public struct SessionRecord: Sendable, Equatable {
    public var member: String
    public var name: String
    /// Where its replay starts when it connects again without `resume`.
    public var cursor: Int64
    /// How far it has acknowledged (an `ack`, or a `resume`): only events every durable
    /// session of the member acknowledged may go before the retention window ends (§6).
    /// At most the cursor; below it for a session that started at the head (it has
    /// acknowledged none of the events before it) until it acknowledges one.
    public var acknowledged: Int64
    public var topics: Set<TopicKind>

    /// `acknowledged` nil: as far as the cursor.
    public init(member: String, name: String, cursor: Int64, acknowledged: Int64? = nil, topics: Set<TopicKind>) {
        self.member = member
        self.name = name
        self.cursor = cursor
        self.acknowledged = acknowledged ?? cursor
        self.topics = topics
    }
}

/// One event of a member's stream, as the complete frame sent on the wire.
public struct EventRecord: Sendable, Equatable {
    public var member: String
    public var seq: Int64
    public var at: Timestamp
    /// Child events filtered by subscription carry their topic kind; others nil.
    public var topic: TopicKind?
    public var frame: [UInt8]

    public init(member: String, seq: Int64, at: Timestamp, topic: TopicKind?, frame: [UInt8]) {
        self.member = member
        self.seq = seq
        self.at = at
        self.topic = topic
        self.frame = frame
    }
}
