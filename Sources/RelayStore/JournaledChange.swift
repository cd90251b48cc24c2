// The journaled changes as the table writer reads them: in place, off the batch's bytes.
// Questions and events, nearly every change, become byte ranges the writer binds
// straight into its statements; no record is built, so the writer neither allocates
// for them nor touches the loop's objects. The rare others are read as `Change`s when
// used: kept as their place in the bytes, every change is plain data, copied as bytes
// (a `Change` among them made each copy of any change go through its value witnesses).

import RelayProtocol

/// A journaled question: all of it (`asked` is set) or only its state.
struct QuestionRow {
    /// The parts only a whole question has: where its content, child and family lie.
    struct Asked {
        /// The content's bytes; without its closing brace when `isOpen` (written as a copy
        /// inside an event, `Change.write(question:contentIn:into:)`).
        var content: Range<Int>
        var isOpen = false
        var child: Range<Int>
        var family: Range<Int>
        var createdAt: Int64
    }

    struct Answer {
        var choice: Range<Int>
        var guardian: Range<Int>
        var answeredAt: Int64
    }

    var key: QuestionID
    var asked: Asked?
    var id: Range<Int>
    var status: Range<Int>
    var attempt: Int64
    var outcome: Answer?
    /// `QuestionRecord.row` (0: unknown, journaled without one).
    var row: Int64 = 0
}

/// A journaled event: its member, and its encoding without the member (as an event
/// batch's row holds it).
struct EventRow {
    var member: Range<Int>
    var seq: Int64
    var at: Int64
    var encoded: Range<Int>

    func record(in bytes: [UInt8]) throws -> EventRecord {
        var r = ByteReader(bytes: bytes, i: encoded.lowerBound)
        return try EventBatch.read(member: bytes.string(member), from: &r)
    }
}

enum JournaledChange {
    case question(QuestionRow)
    /// A question forgotten, with its row (0: unknown).
    case forgetQuestion(QuestionID, row: Int64)
    case event(EventRow)
    /// Any other change: where its tag is in the bytes (`change(in:)` reads it).
    case other(at: Int)
}

extension JournaledChange {
    /// Reads every change of `bytes` (journal records, one after another).
    static func readAll(_ bytes: [UInt8]) throws -> [JournaledChange] {
        var r = ByteReader(bytes: bytes)
        var out: [JournaledChange] = []
        while !r.atEnd { out.append(try read(from: &r)) }
        return out
    }

    /// Reads the change `Change.encode` wrote at the reader's position.
    static func read(from r: inout ByteReader) throws -> JournaledChange {
        let start = r.i
        let tag = try r.int(), rowed = Change.hasRow(tag), kind = Change.withoutRow(tag)
        switch kind {
        case 3, 4, 11:  // a question asked (with its content or where its copy is), or its state
            var asked: QuestionRow.Asked?
            if kind != 4 {
                let content = kind == 3 ? try r.range() : try Change.contentCopy(from: &r)
                asked = QuestionRow.Asked(
                    content: content, isOpen: kind == 11, child: try r.range(), family: try r.range(), createdAt: try r.int())
            }
            var row = try readState(from: &r)
            row.asked = asked
            if rowed { row.row = try r.int() }
            return .question(row)
        case 5:
            let key = try key(r.range(), in: r.bytes)
            return .forgetQuestion(key, row: rowed ? try r.int() : 0)
        case 10:
            let member = try r.range(), start = r.i
            let seq = try r.int(), at = try r.int()
            _ = try r.range()  // topic
            _ = try r.range()  // frame
            return .event(EventRow(member: member, seq: seq, at: at, encoded: start..<r.i))
        default:
            _ = try Change.read(tag: tag, from: &r)  // to check it and find its end
            return .other(at: start)
        }
    }

    private static func readState(from r: inout ByteReader) throws -> QuestionRow {
        let id = try r.range()
        var row = QuestionRow(key: try key(id, in: r.bytes), id: id, status: try r.range(), attempt: try r.int())
        guard QuestionStatus.allCases.contains(where: { spells(r.bytes, row.status, $0.name) }) else {
            throw JournalError(description: "unknown question status \"\(r.bytes.string(row.status))\" in the journal")
        }
        if try r.bool() { row.outcome = QuestionRow.Answer(choice: try r.range(), guardian: try r.range(), answeredAt: try r.int()) }
        return row
    }

    /// Whether `bytes[range]` is `word` (without making a string of either).
    private static func spells(_ bytes: [UInt8], _ range: Range<Int>, _ word: StaticString) -> Bool {
        guard range.count == word.utf8CodeUnitCount else { return false }
        for k in 0..<range.count where bytes[range.lowerBound + k] != word.utf8Start[k] { return false }
        return true
    }

    private static func key(_ id: Range<Int>, in bytes: [UInt8]) throws -> QuestionID {
        guard let key = bytes[id].withUnsafeBufferPointer(QuestionID.init(utf8:)) else {
            throw JournalError(description: "a journal question id \(bytes.string(id)) is not a UUID")
        }
        return key
    }

    /// The change as a record, read out of `bytes` (for what reads the backlog back).
    func change(in bytes: [UInt8]) throws -> Change {
        switch self {
        case .question(let q):
            let outcome = try q.outcome.map {
                try Change.outcome(choice: Array(bytes[$0.choice]), guardian: bytes.string($0.guardian), answeredAt: $0.answeredAt)
            }
            let status = QuestionStatus(rawValue: bytes.string(q.status)) ?? .pending  // checked when read
            guard let asked = q.asked else {
                return .questionState(
                    QuestionState(key: q.key, status: status, attempt: q.attempt, outcome: outcome, row: q.row))
            }
            let encoded = asked.isOpen ? Change.closedContent(bytes[asked.content]) : Array(bytes[asked.content])
            guard let content = QuestionContent(encoded: encoded) else {
                throw JournalError(description: "a journal question cannot be read")
            }
            return .question(
                QuestionRecord(
                    content: content, child: bytes.string(asked.child), family: bytes.string(asked.family), status: status,
                    attempt: q.attempt, createdAt: Timestamp(milliseconds: asked.createdAt), outcome: outcome, row: q.row))
        case .forgetQuestion(let key, let row):
            return .forgetQuestion(key, row: row)
        case .event(let e):
            return .event(try e.record(in: bytes))
        case .other(let at):
            return try Self.other(at: at, in: bytes)
        }
    }

    /// The change whose tag is at `at`.
    static func other(at: Int, in bytes: [UInt8]) throws -> Change {
        var r = ByteReader(bytes: bytes, i: at)
        return try Change.read(tag: r.int(), from: &r)
    }
}

/// Changes with each question's successive writes folded into one, so a question asked
/// and answered between two checkpoints is written once, and likewise each durable
/// session's (its cursor moves with every ack). Only these changes touch a question's
/// row, and only a session's own changes and drops touch a session's: folding them cannot reorder anything else. (Folded as they are read: a
/// batch's changes are not copied again.)
struct FoldedChanges {
    private(set) var changes: [JournaledChange] = []
    private var lastQuestion: [QuestionID: Int] = [:]
    private var lastSession: [String: [String: Int]] = [:]  // by member, then name

    init(reservingCapacity count: Int = 0) {
        changes.reserveCapacity(count)
        lastQuestion.reserveCapacity(count / 2)
    }

    /// Adds a change read from `bytes`.
    mutating func add(_ change: JournaledChange, in bytes: [UInt8]) throws {
        let id: QuestionID
        switch change {
        case .question(let q): id = q.key
        case .forgetQuestion(let key, _): id = key
        case .event:
            changes.append(change)
            return
        case .other(let at):
            // Only the changes of sessions fold (tags 8, a session, 9, dropping a member's, and
            // 12, dropping one): only those are read here; the rest keep their place.
            var tag = ByteReader(bytes: bytes, i: at)
            guard [8, 9, 12].contains(try tag.int()) else {
                changes.append(change)
                return
            }
            switch try JournaledChange.other(at: at, in: bytes) {
            case .session(let s):
                if let i = lastSession[s.member]?[s.name] {
                    changes[i] = change
                } else {
                    lastSession[s.member, default: [:]][s.name] = changes.count
                    changes.append(change)
                }
            case .dropSessions(let member):
                lastSession[member] = nil  // a later write of one of its sessions stays after the drop
                changes.append(change)
            case .dropSession(let member, let name):
                lastSession[member]?[name] = nil
                changes.append(change)
            default:
                changes.append(change)
            }
            return
        }
        // One hash whether the question is new or not: the defaulted subscript inserts in place.
        guard let i = Self.claim(&lastQuestion[id, default: -1], for: changes.count) else {
            changes.append(change)
            return
        }
        switch (changes[i], change) {
        case (.question(let earlier), .question(var state)) where earlier.asked != nil && state.asked == nil:
            state.asked = earlier.asked
            changes[i] = .question(state)
        case (.forgetQuestion, .question(let state)) where state.asked == nil:
            break  // the state of a forgotten question changes nothing
        case (.forgetQuestion(_, let gone), .question(let again)) where gone != again.row:
            // Asked again after it was forgotten, under a row of its own: the old row is
            // still deleted, before it.
            lastQuestion[id] = changes.count
            changes.append(change)
        default: changes[i] = change  // a state after a state, or a whole write or delete after anything
        }
    }

    /// The index already in `slot`, or nil after putting `index` there (a question new to the batch).
    private static func claim(_ slot: inout Int, for index: Int) -> Int? {
        guard slot < 0 else { return slot }
        slot = index
        return nil
    }
}

extension [UInt8] {
    func string(_ range: Range<Int>) -> String { String(decoding: self[range], as: UTF8.self) }
}
