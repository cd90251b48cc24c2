// Reading what relays before SQLite became the only store left beside their database:
// two journal files of binary change records (`relay.db-changes.0` and `.1`) whose
// newest generations the database's tables may not hold yet. `SQLiteStore` folds them
// into the database once, at the first start of this build, and removes them. Nothing
// here writes the format.
//
// A journal file: an 8-byte magic and an 8-byte generation, then records of
// [payload length: UInt32 LE][checksum of the payload: UInt32 LE][payload]; a record's
// payload is its turn's changes, one after another (`LegacyChange`).

import Glibc
import RelayModel
import RelayProtocol

/// A journal entry could not be read back.
struct JournalError: Error, CustomStringConvertible {
    let description: String
}

/// The records of one journal file.
struct LegacyJournal {
    let generation: Int64
    /// Its whole records. Reading stops at the first that is short or fails its checksum:
    /// a write cut off by a crash, or a record of an older generation the file was started
    /// over on (the checksum, seeded with the generation, tells them apart from version 3 on).
    let records: [[UInt8]]

    /// The magic of each checksum version, from 1.
    private static let magics: [[UInt8]] = [Array("PRJOURN1".utf8), Array("PRJOURN2".utf8), Array("PRJOURN3".utf8)]
    private static let headerBytes = 16

    /// The journal in `bytes`; nil when they are not a journal (an empty file, say).
    init?(bytes: [UInt8]) {
        guard bytes.count >= Self.headerBytes, let found = Self.magics.firstIndex(of: Array(bytes[0..<8])) else { return nil }
        let version = found + 1
        let generation = Self.load(UInt64.self, bytes, 8).map { Int64(bitPattern: $0) } ?? 0
        var records: [[UInt8]] = []
        var at = Self.headerBytes
        while let length = Self.load(UInt32.self, bytes, at).map(Int.init), let sum = Self.load(UInt32.self, bytes, at + 4),
            at + 8 + length <= bytes.count
        {
            let payload = Array(bytes[(at + 8)..<(at + 8 + length)])
            guard payload.withUnsafeBytes({ Checksum.of($0, version: version, generation: generation) }) == sum else { break }
            records.append(payload)
            at += 8 + length
        }
        self.generation = generation
        self.records = records
    }

    private static func load<T: FixedWidthInteger>(_: T.Type, _ bytes: [UInt8], _ at: Int) -> T? {
        guard at >= 0, at + MemoryLayout<T>.size <= bytes.count else { return nil }
        var v: T = 0
        withUnsafeMutableBytes(of: &v) { $0.copyBytes(from: bytes[at..<(at + MemoryLayout<T>.size)]) }
        return T(littleEndian: v)
    }
}

/// A 32-bit digest to tell a whole record from one cut off or damaged; not for
/// security. Version 1 is FNV-1a over 8-byte words, one after another, each multiply
/// waiting for the one before; version 2 runs four such lanes side by side, whose
/// multiplies overlap, and folds them together with the length; version 3 also folds in
/// the file's generation.
enum Checksum {
    private static let prime: UInt64 = 0x100_0000_01B3
    private static let basis: UInt64 = 0xCBF2_9CE4_8422_2325

    static func of(_ raw: UnsafeRawBufferPointer, version: Int, generation: Int64) -> UInt32 {
        var h = basis
        var i = 0
        if version >= 2 {
            var lanes = (basis, basis ^ 1, basis ^ 2, basis ^ 3)
            while i + 32 <= raw.count {
                lanes.0 = (lanes.0 ^ raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)) &* prime
                lanes.1 = (lanes.1 ^ raw.loadUnaligned(fromByteOffset: i + 8, as: UInt64.self)) &* prime
                lanes.2 = (lanes.2 ^ raw.loadUnaligned(fromByteOffset: i + 16, as: UInt64.self)) &* prime
                lanes.3 = (lanes.3 ^ raw.loadUnaligned(fromByteOffset: i + 24, as: UInt64.self)) &* prime
                i += 32
            }
            h = (((lanes.0 ^ lanes.1) &* prime ^ lanes.2) &* prime ^ lanes.3) &* prime
            h = (h ^ UInt64(raw.count)) &* prime
            if version >= 3 { h = (h ^ UInt64(bitPattern: generation)) &* prime }
        }
        while i + 8 <= raw.count {
            h = (h ^ raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)) &* prime
            i += 8
        }
        while i < raw.count {
            h = (h ^ UInt64(raw[i])) &* prime
            i += 1
        }
        return UInt32(truncatingIfNeeded: h ^ (h >> 32))
    }
}

/// Reads the journal's and event batches' compact form (zigzag varints and length-prefixed
/// bytes); throws on anything short or malformed.
struct ByteReader {
    let bytes: [UInt8]
    var i = 0

    var atEnd: Bool { i >= bytes.count }

    mutating func byte() throws -> UInt8 {
        guard i < bytes.count else { throw JournalError(description: "a journal entry ends early") }
        defer { i += 1 }
        return bytes[i]
    }

    mutating func int() throws -> Int64 {
        var u: UInt64 = 0
        var shift: UInt64 = 0
        while i < bytes.count {
            let b = bytes[i]
            i += 1
            u |= UInt64(b & 0x7F) << shift
            if b < 0x80 {
                let v = Int64(bitPattern: u >> 1)
                return u & 1 == 0 ? v : ~v
            }
            shift += 7
            guard shift < 64 else { throw JournalError(description: "a journal integer is too long") }
        }
        throw JournalError(description: "a journal entry ends early")
    }

    mutating func bool() throws -> Bool { try byte() != 0 }

    mutating func data() throws -> [UInt8] { Array(bytes[try range()]) }

    /// Where the next length-prefixed bytes lie, skipping them.
    mutating func range() throws -> Range<Int> {
        let n = Int(try int())
        guard n >= 0, n <= bytes.count - i else { throw JournalError(description: "a journal entry ends early") }
        defer { i += n }
        return i..<(i + n)
    }

    /// Records are checksummed and were written from valid strings, so decoding (which would
    /// repair, never trap) takes the fast path instead of validating generically.
    mutating func string() throws -> String {
        String(decoding: try data(), as: UTF8.self)
    }

    mutating func raw<T: RawRepresentable<String>>(_: T.Type) throws -> T {
        let s = try string()
        guard let v = T(rawValue: s) else { throw JournalError(description: "unknown value \"\(s)\" in the journal") }
        return v
    }
}

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

/// A change as the journal recorded it.
enum LegacyChange: Equatable {
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

extension LegacyChange {
    static func decode(_ bytes: [UInt8]) throws -> [LegacyChange] {
        var r = ByteReader(bytes: bytes)
        var out: [LegacyChange] = []
        while !r.atEnd { out.append(try read(from: &r)) }
        return out
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

    private static func read(from r: inout ByteReader) throws -> LegacyChange { try read(tag: try r.int(), from: &r) }

    /// The change whose tag was just read.
    static func read(tag: Int64, from r: inout ByteReader) throws -> LegacyChange {
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
                    row: 0, child: child, handle: handle, permanent: permanent, until: until < 0 ? nil : Timestamp(milliseconds: until),
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
    /// Applies journaled `changes` in order, as the tables of the build that wrote them
    /// would have after writing them. Questions journaled without a row (by builds before
    /// rows were given) are given rows above every other.
    mutating func apply(legacy changes: [LegacyChange]) {
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
            case .question(var q):
                if q.row == 0 { q.row = questionsByKey[q.key]?.row ?? 0 }
                if questionsByKey.updateValue(q, forKey: q.key) == nil { questionOrder.append(q.key) }
                lastQuestionRow = max(lastQuestionRow, q.row)
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
                s.acknowledged = s.cursor  // an older relay's sessions had acknowledged what their cursor says
                sessionsByKey[key] = s
            case .dropSessions(let member):
                sessionsByKey = sessionsByKey.filter { $0.value.member != member }
            case .dropSession(let member, let name):
                sessionsByKey["\(member)\u{0}\(name)"] = nil
            case .event(let e):
                heads[e.member] = max(heads[e.member] ?? 0, e.seq)
                if firstRetained[e.member] == nil { firstRetained[e.member] = e.seq }
            }
        }
        questions = questionOrder.compactMap { questionsByKey.removeValue(forKey: $0) }
        for i in questions.indices where questions[i].row == 0 {
            lastQuestionRow += 1
            questions[i].row = lastQuestionRow
        }
        knownHandles = Array(knownByKey.values)
        sessions = Array(sessionsByKey.values)
    }
}
