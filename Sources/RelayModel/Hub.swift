// What a relay linked to a family hub keeps for it: the messages the hub must get (an
// outbox, stored with the change that made them, kept until the hub has stored them),
// and how the family's messages are named there.

import RelayProtocol

/// A message for the family hub.
public struct HubOutbound: Sendable, Equatable {
    /// Its place in the outbox: given by the core, in order.
    public var id: Int64
    public var family: String
    public var subject: String
    /// The hub keeps one message per id: a resend after a lost acknowledgement is dropped.
    public var messageID: String
    public var body: [UInt8]
    /// Stored only if nothing was on its subject before: the first decision wins.
    public var firstOnSubject: Bool

    public init(id: Int64, family: String, subject: String, messageID: String, body: [UInt8], firstOnSubject: Bool) {
        self.id = id
        self.family = family
        self.subject = subject
        self.messageID = messageID
        self.body = body
        self.firstOnSubject = firstOnSubject
    }
}

/// The names of a family's stream and subjects on the hub. Ids may hold `.`, which
/// separates subject tokens: it is written `~` there (no id holds `~`).
public enum HubNames {
    /// `FAM_` and the family id in hex: stream names allow fewer characters than ids.
    public static func stream(family: String) -> String {
        "FAM_" + family.utf8.map { String($0, radix: 16, uppercase: true).leftPadded(to: 2) }.joined()
    }

    /// The durable consumer a device reads its families' streams through: the device's
    /// name in hex, so that no two names share one (which would split the messages).
    public static func consumer(device: String) -> String { "device-" + device.utf8.map { String($0, radix: 16) }.joined() }

    /// Every subject of the family.
    public static func all(family: String) -> String { "fam.\(token(family)).>" }

    /// Where a child's question (each asking of it) goes.
    public static func ask(family: String, question: String) -> String { "fam.\(token(family)).ask.\(question)" }

    /// Where the one decision on an asking of a question goes: an answer, a cancel or an expiry.
    public static func decision(family: String, question: String, asking: String) -> String {
        "fam.\(token(family)).dec.\(question).\(asking)"
    }

    /// One asking of a question: its attempt and when the question was first asked (an
    /// id forgotten and asked anew starts again at attempt 1, at another time).
    public static func asking(attempt: Int64, createdAt: Timestamp) -> String { "\(attempt)-\(createdAt.milliseconds)" }

    /// What a subject of a family's stream names.
    public enum Subject: Equatable {
        case ask(question: String)
        case decision(question: String, asking: String)
    }

    /// The family and what the subject names.
    public static func parse(_ subject: String) -> (family: String, subject: Subject)? {
        let parts = subject.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count >= 4, parts[0] == "fam" else { return nil }
        let family = parts[1].replacingOccurrences(of: "~", with: ".")
        switch parts[2] {
        case "ask" where parts.count == 4: return (family, .ask(question: String(parts[3])))
        case "dec" where parts.count == 5: return (family, .decision(question: String(parts[3]), asking: String(parts[4])))
        default: return nil
        }
    }

    private static func token(_ id: String) -> String { id.replacingOccurrences(of: ".", with: "~") }
}

extension String {
    fileprivate func leftPadded(to n: Int) -> String { count >= n ? self : String(repeating: "0", count: n - count) + self }
}
