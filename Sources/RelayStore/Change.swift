// One recorded change to the relay's state, its compact binary form for the journal,
// and how a list of changes folds into a snapshot (what the journal adds at load).

import Glibc
import RelayProtocol

/// A question's status, attempt and outcome: what changes once it is asked.
struct QuestionState: Equatable {
    var key: QuestionID
    var status: QuestionStatus
    var attempt: Int64
    var outcome: Outcome?
    /// `QuestionRecord.row` (0: unknown).
    var row: Int64

    init(key: QuestionID, status: QuestionStatus, attempt: Int64, outcome: Outcome?, row: Int64 = 0) {
        self.key = key
        self.status = status
        self.attempt = attempt
        self.outcome = outcome
        self.row = row
    }

    func applied(to q: QuestionRecord) -> QuestionRecord {
        var q = q
        q.status = status
        q.attempt = attempt
        q.outcome = outcome
        return q
    }
}

/// What the journal records are read back as (at load, and for the writer's rare changes).
indirect enum Change: Equatable {
    case family(String)
    case member(MemberRecord)
    case question(QuestionRecord)
    case questionState(QuestionState)
    /// A question forgotten, with its row (0: unknown).
    case forgetQuestion(QuestionID, row: Int64)
    case known(KnownHandleRecord)
    case unknown(String, NormalizedHandle)
    case session(SessionRecord)
    case dropSessions(String)
    /// One durable session of a member (member, name) forgotten.
    case dropSession(String, String)
    case event(EventRecord)
}

extension Change {
    /// The changes of one commit as one journal entry.
    static func encode(_ changes: [Change], into w: inout ByteWriter) {
        for c in changes { c.write(into: &w) }
    }

    static func decode(_ bytes: [UInt8]) throws -> [Change] {
        var r = ByteReader(bytes: bytes)
        var out: [Change] = []
        while !r.atEnd { out.append(try read(from: &r)) }
        return out
    }

    /// Appends the change's binary form. (The store writes its frequent changes with the
    /// functions below, from the records it is given, without making a `Change`.)
    func write(into w: inout ByteWriter) {
        switch self {
        case .family(let id):
            w.int(1)
            w.string(id)
        case .member(let m):
            w.int(2)
            w.string(m.id)
            w.string(m.family)
            w.string(m.role.rawValue)
            w.data(m.tokenHash)
            w.bool(m.removed)
            w.bool(m.limitsEnabled)
        case .question(let q): Self.write(question: q, into: &w)
        case .questionState(let s): Self.write(stateOf: s.key, s.status, s.attempt, s.outcome, row: s.row, into: &w)
        case .forgetQuestion(let key, let row): Self.write(forgetting: key, row: row, into: &w)
        case .known(let k):
            w.int(6)
            w.string(k.child)
            w.string(k.handle.kind.rawValue)
            w.string(k.handle.value)
            w.bool(k.permanent)
            w.int(k.until?.milliseconds ?? -1)
            w.int(Int64(k.actions.count))
            for a in k.actions { w.string(a) }
        case .unknown(let child, let h):
            w.int(7)
            w.string(child)
            w.string(h.kind.rawValue)
            w.string(h.value)
        case .session(let s): Self.write(session: s, into: &w)
        case .dropSessions(let member):
            w.int(9)
            w.string(member)
        case .dropSession(let member, let name):
            w.int(12)
            w.string(member)
            w.string(name)
        case .event(let e): Self.write(event: e, into: &w)
        }
    }

    // Tags 13, 14, 15 and 16 are 3, 11, 4 and 5 with the question's row after them; the
    // older tags, without a row, are still read (journals written before rows were given).

    /// A question, with its content (`13`) or, when the event in `frame` (a range of the
    /// bytes written so far in the same record) holds a copy of the content but for its
    /// closing brace, with where that copy is (`14`): the question event that goes out with
    /// every question asked repeats the content, and the journal need not hold it twice.
    static func write(question q: QuestionRecord, contentIn frame: Range<Int>? = nil, into w: inout ByteWriter) {
        let content = q.content.encoded
        let copy = frame.flatMap { f in w.withBytes { Self.copy(of: content.dropLast(), in: $0, f) } }
        if let copy {
            w.int(14)
            w.int(Int64(w.count - copy))  // back from here to the copy
            w.int(Int64(content.count - 1))
        } else {
            w.int(13)
            w.data(content)
        }
        w.string(q.child)
        w.string(q.family)
        w.int(q.createdAt.milliseconds)
        writeState(id: q.key, q.status, q.attempt, q.outcome, into: &w)
        w.int(q.row)
    }

    /// A question's status, attempt and outcome (what `QuestionState` holds).
    static func write(stateOf q: QuestionRecord, into w: inout ByteWriter) {
        write(stateOf: q.key, q.status, q.attempt, q.outcome, row: q.row, into: &w)
    }

    private static func write(
        stateOf id: QuestionID, _ status: QuestionStatus, _ attempt: Int64, _ outcome: Outcome?, row: Int64,
        into w: inout ByteWriter
    ) {
        w.int(15)
        writeState(id: id, status, attempt, outcome, into: &w)
        w.int(row)
    }

    static func write(forgetting key: QuestionID, row: Int64, into w: inout ByteWriter) {
        w.int(16)
        key.withCanonicalBytes { w.data($0) }  // as `string` writes it, without making one
        w.int(row)
    }

    /// Whether a question change's tag is followed by the question's row.
    static func hasRow(_ tag: Int64) -> Bool { tag >= 13 && tag <= 16 }

    /// The tag of the same change without a row (3, 11, 4 or 5 for 13 to 16): what the
    /// change holds before its row.
    static func withoutRow(_ tag: Int64) -> Int64 {
        switch tag {
        case 13: 3
        case 14: 11
        case 15: 4
        case 16: 5
        default: tag
        }
    }

    static func write(session s: SessionRecord, into w: inout ByteWriter) {
        w.int(8)
        w.string(s.member)
        w.string(s.name)
        w.int(s.cursor)
        w.string(s.topics.map(\.rawValue).sorted().joined(separator: ","))
    }

    static func write(event e: EventRecord, into w: inout ByteWriter) {
        w.int(10)
        w.string(e.member)
        EventBatch.write(e, into: &w)
    }

    /// Where `content` stands in `bytes[frame]` as an event about its question puts it: right
    /// after the first `"question":`, which comes after the event's type and seq.
    private static func copy(of content: ArraySlice<UInt8>, in b: UnsafeBufferPointer<UInt8>, _ frame: Range<Int>) -> Int? {
        let key: StaticString = #""question":"#
        let keyBytes = UnsafeBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount)
        guard let base = b.baseAddress, frame.upperBound <= b.count else { return nil }
        var at = frame.lowerBound
        let lastKeyStart = min(frame.lowerBound + 64, frame.upperBound - keyBytes.count)
        while at <= lastKeyStart && (b[at] != keyBytes[0] || memcmp(base + at, keyBytes.baseAddress!, keyBytes.count) != 0) {
            at += 1
        }
        let start = at + keyBytes.count
        guard at <= lastKeyStart, content.count <= frame.upperBound - start else { return nil }
        return content.withUnsafeBufferPointer { c in memcmp(base + start, c.baseAddress!, c.count) == 0 } ? start : nil
    }

    /// A question's content journaled as a copy inside an event (`14`, or `11`), closed again.
    static func closedContent(_ copy: ArraySlice<UInt8>) -> [UInt8] { copy + [UInt8(ascii: "}")] }

    /// Where the content of a question journaled as `14` (or `11`) lies, read after its tag; the copy
    /// must lie before it (in the same record: checksummed, written by `write(question:)`).
    static func contentCopy(from r: inout ByteReader) throws -> Range<Int> {
        let here = r.i
        let back = Int(try r.int()), count = Int(try r.int())
        guard back > 0, back <= here, count >= 0, count <= back else {
            throw JournalError(description: "a journal question refers to content it does not hold")
        }
        return (here - back)..<(here - back + count)
    }

    private static func writeState(
        id: QuestionID, _ status: QuestionStatus, _ attempt: Int64, _ outcome: Outcome?, into w: inout ByteWriter
    ) {
        id.withCanonicalBytes { w.data($0) }
        w.string(status.rawValue)
        w.int(attempt)
        w.bool(outcome != nil)
        if let o = outcome {
            w.data(o.choice.encoded)
            w.string(o.guardian)
            w.int(o.answeredAt.milliseconds)
        }
    }

    private static func readState(from r: inout ByteReader) throws -> QuestionState {
        let id = try r.string()
        guard let key = QuestionID(id) else { throw JournalError(description: "a journal question id \(id) is not a UUID") }
        let status = try r.raw(QuestionStatus.self)
        let attempt = try r.int()
        var outcome: Outcome?
        if try r.bool() { outcome = try Self.outcome(choice: try r.data(), guardian: try r.string(), answeredAt: try r.int()) }
        return QuestionState(key: key, status: status, attempt: attempt, outcome: outcome)
    }

    /// An outcome as journaled: its choice encoded, its guardian, when in milliseconds.
    static func outcome(choice: [UInt8], guardian: String, answeredAt: Int64) throws -> Outcome {
        guard let choice = (try? JSON.parse(choice)).flatMap(Choice.init(json:)) else {
            throw JournalError(description: "a journal outcome has no readable choice")
        }
        return Outcome(choice: choice, guardian: guardian, answeredAt: Timestamp(milliseconds: answeredAt))
    }

    private static func read(from r: inout ByteReader) throws -> Change { try read(tag: try r.int(), from: &r) }

    /// The change whose tag was just read.
    static func read(tag: Int64, from r: inout ByteReader) throws -> Change {
        let rowed = hasRow(tag), kind = withoutRow(tag)
        switch kind {
        case 1: return .family(try r.string())
        case 2:
            return .member(
                MemberRecord(
                    id: try r.string(), family: try r.string(), role: try r.raw(Role.self), tokenHash: try r.data(),
                    removed: try r.bool(), limitsEnabled: try r.bool()))
        case 3, 11:
            let encoded = kind == 3 ? try r.data() : closedContent(r.bytes[try contentCopy(from: &r)])
            guard let content = QuestionContent(encoded: encoded) else {
                throw JournalError(description: "a journal question cannot be read")
            }
            let child = try r.string(), family = try r.string(), createdAt = Timestamp(milliseconds: try r.int())
            let s = try readState(from: &r)
            return .question(
                QuestionRecord(
                    content: content, child: child, family: family, status: s.status, attempt: s.attempt,
                    createdAt: createdAt, outcome: s.outcome, row: rowed ? try r.int() : 0))
        case 4:
            var s = try readState(from: &r)
            if rowed { s.row = try r.int() }
            return .questionState(s)
        case 5:
            let id = try r.string()
            guard let key = QuestionID(id) else { throw JournalError(description: "a journal question id \(id) is not a UUID") }
            return .forgetQuestion(key, row: rowed ? try r.int() : 0)
        case 6:
            let child = try r.string()
            let handle = NormalizedHandle(kind: try r.raw(HandleKind.self), value: try r.string())
            let permanent = try r.bool()
            let until = try r.int()
            var actions: [String] = []
            for _ in 0..<max(0, try r.int()) { actions.append(try r.string()) }
            return .known(
                KnownHandleRecord(
                    child: child, handle: handle, permanent: permanent, until: until < 0 ? nil : Timestamp(milliseconds: until),
                    actions: actions))
        case 7: return .unknown(try r.string(), NormalizedHandle(kind: try r.raw(HandleKind.self), value: try r.string()))
        case 8:
            let member = try r.string(), name = try r.string(), cursor = try r.int()
            let topics = Set(try r.string().split(separator: ",").compactMap { TopicKind(rawValue: String($0)) })
            return .session(SessionRecord(member: member, name: name, cursor: cursor, topics: topics))
        case 9: return .dropSessions(try r.string())
        case 10: return .event(try EventBatch.read(member: try r.string(), from: &r))
        case 12: return .dropSession(try r.string(), try r.string())
        case let tag: throw JournalError(description: "unknown journal change \(tag)")
        }
    }
}

// MARK: - Folding into a snapshot

extension StoreSnapshot {
    /// Applies `changes` in order, as the tables would after writing them.
    mutating func apply(_ changes: [Change]) {
        // Journaled before rows were given, a question asked anew takes its row from the
        // table writer when written, above the table's: room is kept for it.
        var unnumbered: Int64 = 0
        guard !changes.isEmpty else { return }
        var familySet = Set(families)
        var memberAt = Dictionary(members.enumerated().map { ($1.id, $0) }, uniquingKeysWith: { $1 })
        var questionsByKey = Dictionary(questions.map { ($0.key, $0) }, uniquingKeysWith: { $1 })
        var questionOrder = questions.map(\.key)
        var knownByKey = Dictionary(knownHandles.map { ("\($0.child)\u{0}\($0.handle.key)", $0) }, uniquingKeysWith: { $1 })
        var sessionsByKey = Dictionary(sessions.map { ("\($0.member)\u{0}\($0.name)", $0) }, uniquingKeysWith: { $1 })
        for change in changes {
            switch change {
            case .family(let id):
                if familySet.insert(id).inserted { families.append(id) }
            case .member(let m):
                if let i = memberAt[m.id] {
                    members[i] = m
                } else {
                    memberAt[m.id] = members.count
                    members.append(m)
                }
            case .question(let q):
                if questionsByKey.updateValue(q, forKey: q.key) == nil { questionOrder.append(q.key) }
                lastQuestionRow = max(lastQuestionRow, q.row)
                if q.row == 0 { unnumbered += 1 }
            case .questionState(let s):
                if let q = questionsByKey[s.key] { questionsByKey[s.key] = s.applied(to: q) }
                lastQuestionRow = max(lastQuestionRow, s.row)
            case .forgetQuestion(let key, let row):
                questionsByKey[key] = nil
                lastQuestionRow = max(lastQuestionRow, row)
            case .known(let k):
                knownByKey["\(k.child)\u{0}\(k.handle.key)"] = k
            case .unknown(let child, let h):
                knownByKey["\(child)\u{0}\(h.key)"] = nil
            case .session(var s):
                // A cursor never goes back: the tables may hold one newer than the journal's.
                let key = "\(s.member)\u{0}\(s.name)"
                s.cursor = max(s.cursor, sessionsByKey[key]?.cursor ?? s.cursor)
                sessionsByKey[key] = s
            case .dropSessions(let member):
                sessionsByKey = sessionsByKey.filter { $0.value.member != member }
            case .dropSession(let member, let name):
                sessionsByKey["\(member)\u{0}\(name)"] = nil
            case .event(let e):
                heads[e.member] = max(heads[e.member] ?? 0, e.seq)
            }
        }
        questions = questionOrder.compactMap { questionsByKey.removeValue(forKey: $0) }
        lastQuestionRow += unnumbered
        knownHandles = Array(knownByKey.values)
        sessions = Array(sessionsByKey.values)
    }
}
