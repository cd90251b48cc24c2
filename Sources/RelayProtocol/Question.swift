// The question as the contract defines it (§5): validation of an asked question into
// a canonical form, choices, and the JSON the relay sends on. Validation never
// throws away a reason: every rejection says what was wrong.

import Foundation

/// The topic kinds a question can have; also the subscription names.
public enum TopicKind: String, Sendable, CaseIterable, Hashable {
    case communication, significantAppUpdate

    /// By case, not by its raw string (see `HandleKind`): checked for every event delivered.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .communication: hasher.combine(0 as UInt8)
        case .significantAppUpdate: hasher.combine(1 as UInt8)
        }
    }
}

/// The question states (§5): `pending → answered | cancelled | expired`, and back to
/// `pending` from `cancelled` or `expired` by a re-ask.
public enum QuestionStatus: String, Sendable, CaseIterable {
    case pending, answered, cancelled, expired

    /// The raw value, without making a `String` of it (frames write it for every question).
    public var name: StaticString {
        switch self {
        case .pending: "pending"
        case .answered: "answered"
        case .cancelled: "cancelled"
        case .expired: "expired"
        }
    }
}

/// What a choice means.
public enum Answer: String, Sendable {
    case approval, denial
}

/// One answer a guardian can give.
public struct Choice: Sendable, Equatable {
    public let id: String
    public let title: String
    public let answer: Answer
    /// For an approval that lasts this many seconds.
    public let durationSeconds: Int64?
    /// Whether this choice's id is `id`, code point for code point (ids are compared
    /// exactly, as handles are: Swift's `==` would take canonically equivalent text as one).
    public func has(id other: String) -> Bool { id.utf8.elementsEqual(other.utf8) }
    /// `json`, encoded once: an answer's choice is written into its response, the
    /// question's outcome and the store.
    public let encoded: [UInt8]

    public init(id: String, title: String, answer: Answer, durationSeconds: Int64? = nil) {
        self.id = id
        self.title = title
        self.answer = answer
        self.durationSeconds = durationSeconds
        var out: [UInt8] = [UInt8(ascii: "{")]
        out.appendJSONField("id", id)
        out.appendJSONField("title", title)
        out.appendJSONField("answer", answer.rawValue)
        if let durationSeconds { out.appendJSONField("durationSeconds", durationSeconds) }
        out.append(UInt8(ascii: "}"))
        encoded = out
    }

    public static let approve = Choice(id: "approve", title: "Approve", answer: .approval)
    public static let decline = Choice(id: "decline", title: "Decline", answer: .denial)

    public var json: JSON {
        var o: JSONObject = ["id": .string(id), "title": .string(title), "answer": .string(answer.rawValue)]
        if let durationSeconds { o["durationSeconds"] = .int(durationSeconds) }
        return .object(o)
    }

    /// Appends `json`'s encoding.
    public func encode(into out: inout [UInt8]) { out.append(bytes: encoded) }

    public init?(json: JSON) {
        guard let id = json["id"]?.string, let title = json["title"]?.string,
            let a = json["answer"]?.string, let answer = Answer(rawValue: a)
        else { return nil }
        self.init(id: id, title: title, answer: answer, durationSeconds: json["durationSeconds"]?.int)
    }
}

/// The communication actions of the contract; absent or empty means `communicate`. A list:
/// a scan of ten short strings costs less than hashing the one looked for.
public let communicationActions: [String] = [
    "message", "audioCall", "videoCall", "call", "chat", "follow", "beFollowed", "friend", "connect", "communicate",
]

/// Limits on a question's content.
public enum QuestionLimits {
    public static let maxPersons = 64
    public static let maxChoices = 16
    public static let maxAvatarBytes = 256 * 1024
}

/// A question that passed validation, in canonical form. Immutable, and shared rather
/// than copied: a question's record is copied into every change and lookup.
public final class QuestionContent: Sendable, Equatable {
    /// The question's UUID: its key in maps.
    public let key: QuestionID
    public let kind: TopicKind
    /// The normalized handles of a communication topic (empty otherwise).
    public let handles: HandleList
    /// The actions of a communication topic, as asked (empty otherwise).
    public let actions: ActionList
    public let choices: [Choice]
    public let defaultChoice: String
    public let expiration: Timestamp?
    /// `json`, encoded once: it is stored and sent on many times. The fields above are what
    /// the rules need; the rest of the question is kept only in these bytes (a relay may
    /// remember many questions).
    public let encoded: [UInt8]

    /// Upper-case canonical UUID, made from `key` when asked for (a relay may remember many
    /// questions; what is written on goes straight from `key`).
    public var id: String { key.description }

    /// The topic as sent on: known fields only, handles as given.
    public var topic: JSON { json["topic"] ?? .null }

    public func choice(_ id: String) -> Choice? { choices.first { $0.has(id: id) } }

    /// Every field follows from the canonical encoding.
    public static func == (a: QuestionContent, b: QuestionContent) -> Bool { a === b || a.encoded == b.encoded }

    /// `{id, topic, choices, defaultChoice, expirationDate?}`.
    public var json: JSONObject {
        guard case .object(let o)? = try? JSON.parse(encoded) else { return [:] }
        return o
    }

    /// Reads back the canonical form written by `encoded` (no validation beyond shape).
    public init?(encoded: [UInt8]) {
        guard let stored = try? JSON.parse(encoded), let key = stored["id"]?.string.flatMap(QuestionID.init),
            let topic = stored["topic"],
            let kind = topic["kind"]?.string.flatMap(TopicKind.init(rawValue:)),
            let choicesJSON = stored["choices"],
            // Most questions have the default choices: shared, not made again for each.
            let choices = choicesJSON == Self.defaultChoicesJSON
                ? Self.defaultChoices : choicesJSON.array?.compactMap(Choice.init(json:)),
            let def = stored["defaultChoice"]?.string
        else { return nil }
        self.key = key
        self.kind = kind
        self.choices = choices
        self.defaultChoice = def
        self.expiration = stored["expirationDate"]?.string.flatMap(Timestamp.init(rfc3339:))
        self.handles = HandleList(
            topic["personInformation"]?.array?.compactMap { $0["handle"].flatMap(NormalizedHandle.init(json:)) } ?? [])
        self.actions = ActionList(topic["actions"]?.array?.compactMap(\.string) ?? []) ?? ActionList()
        self.encoded = encoded
    }

    init(
        key: QuestionID, kind: TopicKind, handles: HandleList, actions: ActionList, choices: [Choice],
        defaultChoice: String, expiration: Timestamp?, encoded: [UInt8]
    ) {
        self.key = key
        self.kind = kind
        self.handles = handles
        self.actions = actions
        self.choices = choices
        self.defaultChoice = defaultChoice
        self.expiration = expiration
        // A relay keeps many questions: room reserved and not used is not kept with them.
        // (A copy through a buffer pointer: `Array(encoded[...])` hands back the same
        // storage when the slice is the whole array.)
        self.encoded = encoded.capacity - encoded.count > 64 ? encoded.withUnsafeBufferPointer(Array.init) : encoded
    }
}

extension QuestionContent {
    /// Approve and decline, when a question names no choices: most do, so their encoding is kept.
    static let defaultChoices: [Choice] = [.approve, .decline]
    private static let defaultChoicesJSON: JSON = .array(defaultChoices.map(\.json))
    static let defaultChoicesEncoded: [UInt8] = {
        var out: [UInt8] = []
        encode(defaultChoices, into: &out)
        return out
    }()

    private static func encode(_ choices: [Choice], into out: inout [UInt8]) {
        out.append(UInt8(ascii: "["))
        for (n, c) in choices.enumerated() {
            if n > 0 { out.append(UInt8(ascii: ",")) }
            c.encode(into: &out)
        }
        out.append(UInt8(ascii: "]"))
    }

    /// Validates an asked question (§5, §12). Throws `invalidQuestion` with the reason.
    public static func validate(_ q: JSONObject, now: Timestamp) throws(RequestError) -> QuestionContent {
        func invalid(_ why: String) -> RequestError { RequestError(.invalidQuestion, why) }

        guard let rawID = q["id"]?.string else { throw invalid("question.id must be a UUID string") }
        guard let key = QuestionID(rawID) else { throw invalid("question.id \"\(rawID)\" is not a UUID") }
        guard let topicObj = q["topic"]?.object else { throw invalid("question.topic must be an object") }
        guard let kindName = topicObj["kind"]?.string, let kind = TopicKind(rawValue: kindName) else {
            throw invalid("question.topic.kind must be \"communication\" or \"significantAppUpdate\"")
        }

        // The canonical form is written as it is validated: known fields only, in a fixed order.
        var out: [UInt8] = [UInt8(ascii: "{")]
        out.reserveCapacity(512)
        out.appendJSONField("id", key)
        out.appendJSONKey("topic")
        out.append(UInt8(ascii: "{"))
        out.appendJSONField("kind", kind.rawValue)
        var handles: [NormalizedHandle] = []
        var actions = ActionList()
        switch kind {
        case .communication:
            guard let persons = topicObj["personInformation"]?.array else {
                throw invalid("topic.personInformation must be an array of people")
            }
            guard (1...QuestionLimits.maxPersons).contains(persons.count) else {
                throw invalid("topic.personInformation must hold 1 to \(QuestionLimits.maxPersons) people, not \(persons.count)")
            }
            out.appendJSONKey("personInformation")
            out.append(UInt8(ascii: "["))
            for (n, p) in persons.enumerated() {
                guard let person = p.object else { throw invalid("personInformation[\(n)] must be an object") }
                guard let h = person["handle"]?.object, let value = h["value"]?.string,
                    let kindName = h["kind"]?.string
                else { throw invalid("personInformation[\(n)].handle must have a string value and kind") }
                guard let hk = HandleKind(rawValue: kindName) else {
                    throw invalid("personInformation[\(n)].handle.kind \"\(kindName)\" is not phoneNumber, emailAddress or custom")
                }
                guard value.utf8.count <= NormalizedHandle.maxValueBytes else {
                    throw invalid(
                        "personInformation[\(n)].handle's value is \(value.utf8.count) bytes long, more than \(NormalizedHandle.maxValueBytes)"
                    )
                }
                guard let normalized = NormalizedHandle(kind: hk, rawValue: value) else {
                    throw invalid("personInformation[\(n)].handle \"\(value)\" is not a valid \(kindName)")
                }
                handles.append(normalized)
                if n > 0 { out.append(UInt8(ascii: ",")) }
                out.append(UInt8(ascii: "{"))
                out.appendJSONKey("handle")
                out.append(UInt8(ascii: "{"))
                out.appendJSONField("value", value)
                out.appendJSONField("kind", kindName)
                out.append(UInt8(ascii: "}"))
                switch person["nameComponents"] {
                case nil, .null?: break
                case .object(let names)?:
                    // Name parts are text (PersonNameComponents: givenName, …, and a
                    // phoneticRepresentation of the same shape). Nothing else is allowed, so
                    // that what is kept never outgrows what was sent: a number is written out
                    // in full (`1e14` as 15 digits).
                    func text(_ o: JSONObject, nested: Bool) -> Bool {
                        o.fields.allSatisfy { field in
                            switch field.value {
                            case .string, .null: return true
                            case .object(let inner): return !nested && text(inner, nested: true)
                            default: return false
                            }
                        }
                    }
                    guard text(names, nested: false) else {
                        throw invalid("personInformation[\(n)].nameComponents must hold only text (givenName, familyName, …)")
                    }
                    out.appendJSONKey("nameComponents")
                    names.encode(into: &out)
                default: throw invalid("personInformation[\(n)].nameComponents must be an object or null")
                }
                switch person["avatarImage"] {
                case nil, .null?:
                    out.appendJSONKey("avatarImage")
                    out.append(literal: "null")
                case .string(let b64)?:
                    guard let data = Data(base64Encoded: b64) else {
                        throw invalid("personInformation[\(n)].avatarImage is not valid base64")
                    }
                    guard data.count <= QuestionLimits.maxAvatarBytes else {
                        throw invalid(
                            "personInformation[\(n)].avatarImage is \(data.count) bytes; at most \(QuestionLimits.maxAvatarBytes) are allowed"
                        )
                    }
                    out.appendJSONField("avatarImage", b64)
                default: throw invalid("personInformation[\(n)].avatarImage must be a base64 string or null")
                }
                out.append(UInt8(ascii: "}"))
            }
            out.append(UInt8(ascii: "]"))
            switch topicObj["actions"] {
            case nil, .null?: break
            case .array(let list)?:
                for a in list {
                    guard let name = a.string, let place = communicationActions.firstIndex(of: name) else {
                        throw invalid("topic.actions: \(a.text) is not one of \(communicationActions.sorted().joined(separator: ", "))")
                    }
                    if !actions.contains(name) { actions.append(place: place) }
                }
            default: throw invalid("topic.actions must be an array of action names")
            }
            if actions.isEmpty { actions = .communicate }
            out.appendJSONKey("actions")
            out.append(UInt8(ascii: "["))
            for (k, a) in actions.enumerated() {
                if k > 0 { out.append(UInt8(ascii: ",")) }
                JSON.encodeString(a, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .significantAppUpdate:
            guard let d = topicObj["description"]?.string, !d.trimmingWhitespace().isEmpty else {
                throw invalid("a significantAppUpdate topic needs a non-empty description")
            }
            out.appendJSONField("description", d)
        }
        out.append(UInt8(ascii: "}"))

        var choices: [Choice]
        switch q["choices"] {
        case nil, .null?:
            choices = Self.defaultChoices
        case .array(let list)?:
            guard list.count <= QuestionLimits.maxChoices else {
                throw invalid("at most \(QuestionLimits.maxChoices) choices are allowed, not \(list.count)")
            }
            choices = []
            for (n, c) in list.enumerated() {
                guard let o = c.object, let cid = o["id"]?.string, !cid.isEmpty, let title = o["title"]?.string,
                    !title.isEmpty
                else { throw invalid("choices[\(n)] needs a non-empty string id and title") }
                guard let a = o["answer"]?.string, let answer = Answer(rawValue: a) else {
                    throw invalid("choices[\(n)].answer must be \"approval\" or \"denial\"")
                }
                var duration: Int64?
                switch o["durationSeconds"] {
                case nil, .null?: break
                case let v?:
                    // A number past Int64 lasts as long as any: the end is capped anyway.
                    guard let d = v.wholeNumber, d > 0 else {
                        throw invalid("choices[\(n)].durationSeconds must be a whole number of seconds, at least 1")
                    }
                    guard answer == .approval else {
                        throw invalid("choices[\(n)].durationSeconds is only meaningful on an approval")
                    }
                    duration = d
                }
                guard !choices.contains(where: { $0.has(id: cid) }) else { throw invalid("choice id \"\(cid)\" is used twice") }
                guard !choices.contains(where: { $0.title.utf8.elementsEqual(title.utf8) }) else {
                    throw invalid("choice title \"\(title)\" is used twice")
                }
                choices.append(Choice(id: cid, title: title, answer: answer, durationSeconds: duration))
            }
            guard choices.contains(where: { $0.answer == .approval }), choices.contains(where: { $0.answer == .denial })
            else { throw invalid("choices must hold at least one approval and one denial") }
        default:
            throw invalid("choices must be an array")
        }

        let defaultChoice: String
        switch q["defaultChoice"] {
        case nil, .null?:
            defaultChoice = choices.first { $0.answer == .denial }!.id
        case .string(let d)?:
            guard choices.contains(where: { $0.has(id: d) }) else {
                throw invalid("defaultChoice \"\(d)\" is not one of the question's choice ids")
            }
            defaultChoice = d
        default:
            throw invalid("defaultChoice must be a choice id")
        }

        var expiration: Timestamp?
        switch q["expirationDate"] {
        case nil, .null?: break
        case .string(let s)?:
            guard let t = Timestamp(rfc3339: s) else {
                throw invalid("expirationDate \"\(s)\" is not an RFC 3339 timestamp (with, in UTC, a year from 0000 to 9999)")
            }
            guard t > now else { throw invalid("expirationDate \(s) is not in the future") }
            expiration = t
        default:
            throw invalid("expirationDate must be an RFC 3339 timestamp string")
        }

        out.appendJSONKey("choices")
        if choices == Self.defaultChoices {
            out.append(bytes: Self.defaultChoicesEncoded)
        } else {
            Self.encode(choices, into: &out)
        }
        out.appendJSONField("defaultChoice", defaultChoice)
        if let expiration { out.appendJSONField("expirationDate", expiration) }
        out.append(UInt8(ascii: "}"))
        return QuestionContent(
            key: key, kind: kind, handles: HandleList(handles), actions: actions, choices: choices, defaultChoice: defaultChoice,
            expiration: expiration, encoded: out)
    }
}
