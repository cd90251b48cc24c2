// Reading an `ask` straight from its frame's bytes into a validated question: one pass,
// no tree, the canonical form written as the bytes are read. It takes the common shape
// only — the frame's fields in any order, the question's in the canonical order (as
// PermissionKit and most clients write them), every string plain ASCII, the default
// choices — and gives up on anything else, every invalid question included. The caller
// then parses the frame and validates the question, which also says what is wrong: what
// this reader accepts, that way accepts too, with the same result (tests hold the two
// to it on generated and mutated frames).

import Foundation

extension QuestionContent {
    /// Reads `{"type":"ask","id":…,"question":{…}}` when it has the common shape; nil
    /// otherwise (then `JSON.parse` and `validate` decide).
    public static func readAsk(_ body: [UInt8], now: Timestamp) -> (requestID: String, question: QuestionContent)? {
        body.withUnsafeBufferPointer { readAsk($0, now: now) }
    }

    /// The same, from bytes read in place.
    public static func readAsk(_ body: UnsafeBufferPointer<UInt8>, now: Timestamp) -> (requestID: String, question: QuestionContent)? {
        var reader = PlainReader(body)
        return reader.ask(now: now)
    }
}

extension PlainReader {
    // The fields this reader knows, by object; the question's in canonical order.
    static let askFrameFields: [StaticString] = ["type", "id", "question"]
    static let questionFields: [StaticString] = ["id", "topic", "choices", "defaultChoice", "expirationDate"]
    static let topicFields: [StaticString] = ["kind", "personInformation", "actions"]
    static let personFields: [StaticString] = ["handle", "nameComponents", "avatarImage"]
    static let handleFields: [StaticString] = ["value", "kind"]
    static let handleKinds = HandleKind.allCases

    mutating func ask(now: Timestamp) -> (requestID: String, question: QuestionContent)? {
        guard take(UInt8(ascii: "{")) else { return nil }
        var fields = Fields(ordered: false)
        var requestID: String?
        var question: QuestionContent?
        while let k = nextField(of: Self.askFrameFields, &fields) {
            switch k {
            case 0:
                guard let type = plainString(), Self.equal(type, "ask") else { return nil }
            case 1:
                guard let id = plainString() else { return nil }
                requestID = String(decoding: id, as: UTF8.self)
            default:
                guard let q = self.question(now: now) else { return nil }
                question = q
            }
        }
        skipSpace()
        guard !failed, i == buf.count, fields.seen == 0b111, let requestID, let question else { return nil }
        return (requestID, question)
    }

    // MARK: - The question, in the order `QuestionContent.validate` writes it

    /// Room for the canonical form beyond the frame's bytes: what it copies takes no more
    /// bytes than in the frame (a time at most two more, its milliseconds written out), and
    /// it adds at most a `null` avatar for each person and the defaults (choices, default
    /// choice, actions). Should a form not fit, the frame is left to the parser.
    static var contentSlack: Int { 24 * QuestionLimits.maxPersons + QuestionContent.defaultChoicesEncoded.count + 256 }

    /// The question, its canonical form put together in a buffer of its own (on the stack
    /// when it is small): appending to an array field by field checked its uniqueness and
    /// capacity again at every append.
    private mutating func question(now: Timestamp) -> QuestionContent? {
        guard take(UInt8(ascii: "{")) else { return nil }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: buf.count + Self.contentSlack) { room in
            var out = Gatherer(buf: room)
            out.put(UInt8(ascii: "{"))
            return question(now: now, into: &out)
        }
    }

    private mutating func question(now: Timestamp, into out: inout Gatherer) -> QuestionContent? {
        var fields = Fields(ordered: true)
        var key: QuestionID?
        var handles = HandleList()
        var actions = ActionList()
        var defaultChoice = Choice.decline.id
        var expiration: Timestamp?
        while let k = nextField(of: Self.questionFields, &fields) {
            switch k {
            case 0:
                guard let raw = plainString(), let bits = QuestionID(utf8: raw) else { return nil }
                key = bits
                bits.withCanonicalBytes { out.putField("id", $0, quoted: true) }
            case 1:
                guard key != nil else { return nil }
                out.put(#","topic":{"#)
                guard topic(into: &out, &handles, &actions) else { return nil }
            case 2:
                guard takeNull() || takeDefaultChoices() else { return nil }
            case 3:
                if takeNull() { break }
                guard let d = plainString(),
                    let choice = QuestionContent.defaultChoices.first(where: { Self.equal(d, $0.id) })
                else { return nil }
                defaultChoice = choice.id
            default:
                if takeNull() { break }
                guard let s = plainString(), let t = Timestamp(rfc3339: String(decoding: s, as: UTF8.self)), t > now
                else { return nil }
                expiration = t
            }
        }
        guard !failed, fields.seen & 0b11 == 0b11, let key else { return nil }
        out.put(#","choices":"#)
        QuestionContent.defaultChoicesEncoded.withUnsafeBufferPointer { out.put($0) }
        defaultChoice.withUTF8Bytes { out.putField("defaultChoice", $0, quoted: true) }  // a default's id: plain
        if let expiration { expiration.withRFC3339 { out.putField("expirationDate", $0, quoted: true) } }
        out.put(UInt8(ascii: "}"))
        guard !out.overflowed else { return nil }
        return QuestionContent(
            key: key, kind: .communication, handles: handles, actions: actions,
            choices: QuestionContent.defaultChoices, defaultChoice: defaultChoice, expiration: expiration,
            encoded: Array(UnsafeBufferPointer(rebasing: out.buf[..<out.count])))
    }

    /// A communication topic, after its `{` is written.
    private mutating func topic(into out: inout Gatherer, _ handles: inout HandleList, _ actions: inout ActionList)
        -> Bool
    {
        guard take(UInt8(ascii: "{")) else { return false }
        var fields = Fields(ordered: true)
        var actionsOpen = false  // `"actions":[` written, the list not yet closed
        while let k = nextField(of: Self.topicFields, &fields) {
            switch k {
            case 0:  // necessarily first: nothing after it may come without it
                guard let kind = plainString(), Self.equal(kind, "communication") else { return false }
                out.put(#""kind":"communication""#)
            case 1:
                guard fields.seen & 1 != 0, take(UInt8(ascii: "[")) else { return false }
                out.put(#","personInformation":["#)
                var n = 0
                while nextElement(n) {
                    guard n < QuestionLimits.maxPersons, person(n, into: &out, &handles) else { return false }
                    n += 1
                }
                guard n > 0 else { return false }
                out.put(UInt8(ascii: "]"))
            default:  // the last field: written as read, each action once; closed below
                if takeNull() { break }
                guard take(UInt8(ascii: "[")) else { return false }
                out.put(#","actions":["#)
                actionsOpen = true
                var seen: UInt32 = 0
                var n = 0
                while nextElement(n) {
                    guard let a = plainString(), let k = communicationActions.firstIndex(where: { Self.equal(a, $0) }) else {
                        return false
                    }
                    if seen & (1 << k) == 0 {
                        if seen != 0 { out.put(UInt8(ascii: ",")) }
                        out.putField(key: nil, a, quoted: true)
                        actions.append(place: k)
                        seen |= 1 << k
                    }
                    n += 1
                }
            }
        }
        guard !failed, fields.seen & 0b11 == 0b11 else { return false }
        if !actionsOpen { out.put(#","actions":["#) }
        if actions.isEmpty {  // none, null or empty
            out.put(#""communicate""#)
            actions = .communicate
        }
        out.put("]}")
        return true
    }

    /// One of `personInformation`.
    private mutating func person(_ n: Int, into out: inout Gatherer, _ handles: inout HandleList) -> Bool {
        guard take(UInt8(ascii: "{")) else { return false }
        if n > 0 { out.put(UInt8(ascii: ",")) }
        out.put(UInt8(ascii: "{"))
        var fields = Fields(ordered: true)
        var avatar: UnsafeBufferPointer<UInt8>?
        while let k = nextField(of: Self.personFields, &fields) {
            switch k {
            case 0:
                guard let handle = handle(into: &out) else { return false }
                handles.append(handle)
            case 1:
                guard fields.seen & 1 != 0 else { return false }
                if takeNull() { break }
                guard take(UInt8(ascii: "{")) else { return false }
                // Any names, written as `JSONObject.encode` writes them.
                out.put(#","nameComponents":{"#)
                var count = 0
                while let name = nextName(count) {
                    guard let value = plainString() else { return false }
                    out.putField(key: name, value, quoted: true)
                    count += 1
                }
                guard !failed else { return false }
                out.put(UInt8(ascii: "}"))
            default:
                guard fields.seen & 1 != 0 else { return false }
                if takeNull() { break }
                guard let b64 = plainString(), let data = Data(base64Encoded: String(decoding: b64, as: UTF8.self)),
                    data.count <= QuestionLimits.maxAvatarBytes
                else { return false }
                avatar = b64
            }
        }
        guard !failed, fields.seen & 1 != 0 else { return false }
        if let avatar {
            out.putField("avatarImage", avatar, quoted: true)
        } else {
            out.put(#","avatarImage":null"#)
        }
        out.put(UInt8(ascii: "}"))
        return true
    }

    /// `{"value":…,"kind":…}`, written as given; normalized.
    private mutating func handle(into out: inout Gatherer) -> NormalizedHandle? {
        guard take(UInt8(ascii: "{")) else { return nil }
        var fields = Fields(ordered: true)
        var value: UnsafeBufferPointer<UInt8>?
        var normalized: NormalizedHandle?
        while let k = nextField(of: Self.handleFields, &fields) {
            guard let s = plainString() else { return nil }
            if k == 0 {
                value = s
            } else {
                // A value too long is refused by the full reading, which says so.
                guard let value, value.count <= NormalizedHandle.maxValueBytes,
                    let kind = Self.handleKinds.first(where: { Self.equal(s, $0.rawValue) }),
                    let n = NormalizedHandle(kind: kind, plainASCII: value)
                else { return nil }
                normalized = n
                out.put(#""handle":{"#)
                out.putField("value", value, quoted: true)
                out.putField("kind", s, quoted: true)
                out.put(UInt8(ascii: "}"))
            }
        }
        guard !failed, let normalized else { return nil }
        return normalized
    }

    /// The default choices, compactly written (as PermissionKit sends them).
    private mutating func takeDefaultChoices() -> Bool {
        skipSpace()
        let expected = QuestionContent.defaultChoicesEncoded
        guard buf.count - i >= expected.count,
            expected.withUnsafeBufferPointer({ memcmp(buf.baseAddress! + i, $0.baseAddress!, $0.count) == 0 })
        else { return false }
        i += expected.count
        return true
    }
}
