// The PermissionKit value types, with Apple's names and shapes. Where Apple uses a
// type Linux lacks (CGImage) a plain stand-in takes its place (PNG `Data`).

import Foundation
import RelayProtocol

/// A piece of identifying information that can be used to communicate with someone.
public struct CommunicationHandle: Codable, Hashable, Sendable {
    /// The kind of a handle.
    public enum Kind: String, Codable, Hashable, Sendable, CaseIterable {
        /// A phone number; compared by its digits.
        case phoneNumber
        /// An e-mail address; compared lower-cased.
        case emailAddress
        /// An app's own kind of id, compared as it is.
        case custom
    }

    /// The value of the communication handle.
    public var value: String
    /// What the value is: a phone number, an e-mail address, or an app's own kind of id.
    public var kind: Kind

    /// A handle as the app knows it; the relay compares handles by their `normalized` form.
    public init(value: String, kind: Kind) {
        self.value = value
        self.kind = kind
    }

    /// The handle as the relay compares it (phone digits, lower-cased e-mail), or nil when invalid.
    public var normalized: CommunicationHandle? {
        NormalizedHandle(kind: HandleKind(rawValue: kind.rawValue)!, rawValue: value).map {
            CommunicationHandle(value: $0.value, kind: kind)
        }
    }
}

/// A topic a question can be about: `CommunicationTopic` or `SignificantAppUpdateTopic`.
/// (Apple has an `ask` for each; here `ask` is generic, and the relay refuses a question
/// of any other topic with `invalidQuestion`.)
public protocol QuestionTopic: Codable, Sendable {
    /// The unique identifier for the topic (also its subscription name on the wire).
    static var id: String { get }
}

/// A request to communicate with one or more people.
public struct CommunicationTopic: QuestionTopic, Hashable {
    /// The topic's name on the wire, and in subscriptions.
    public static let id = "communication"

    /// A communication action you can request permission for.
    public enum Action: String, Codable, Hashable, Sendable, CaseIterable {
        /// Send messages.
        case message
        /// Make or take audio calls.
        case audioCall
        /// Make or take video calls.
        case videoCall
        /// Make or take calls of either kind.
        case call
        /// Chat.
        case chat
        /// Follow the person.
        case follow
        /// Be followed by the person.
        case beFollowed
        /// Become friends.
        case friend
        /// Connect.
        case connect
        /// Communicate in any way (what a topic without actions asks for).
        case communicate
    }

    /// Who the child wants to communicate with.
    public struct PersonInformation: Codable, Hashable, Sendable {
        /// How the child would reach the person; what a guardian's approval makes known.
        public var handle: CommunicationHandle
        /// The person's name, to show the guardian.
        public var nameComponents: PersonNameComponents?
        /// PNG bytes (Apple's CGImage has no Linux counterpart).
        public var avatarImage: Data?

        /// A person, by handle, with a name and a picture when the app has them.
        public init(handle: CommunicationHandle, nameComponents: PersonNameComponents? = nil, avatarImage: Data? = nil) {
            self.handle = handle
            self.nameComponents = nameComponents
            self.avatarImage = avatarImage
        }
    }

    /// The people to communicate with (1 to 64).
    public var personInformation: [PersonInformation]
    /// The ways to communicate; empty means `communicate`.
    public var actions: Set<Action>

    /// A request to communicate with `personInformation` in the ways `actions` names.
    public init(personInformation: [PersonInformation], actions: Set<Action> = []) {
        self.personInformation = personInformation
        self.actions = actions
    }
}

/// A request to keep using an app after a significant update.
public struct SignificantAppUpdateTopic: QuestionTopic, Hashable {
    /// The topic's name on the wire, and in subscriptions.
    public static let id = "significantAppUpdate"
    /// What changed, for the guardian to read (not empty).
    public let description: String
    /// A request to keep using the app after the update `description` tells of.
    public init(description: String) { self.description = description }
}

/// One answer a guardian can give.
public struct PermissionChoice: Codable, Hashable, Sendable, Identifiable {
    /// What a choice means.
    public enum Answer: String, Codable, Hashable, Sendable {
        /// Choosing it approves: the question's handles become known.
        case approval
        /// Choosing it denies.
        case denial
    }

    /// The choice's id, unique within its question (Apple asks for ids unique everywhere;
    /// the relay keeps choices per question); a guardian answers with it.
    public var id: String
    /// What the guardian is shown, unique within its question.
    public var title: String
    /// Whether choosing it approves or denies.
    public var answer: Answer
    /// An approval that lasts this long (beyond Apple's API: time-limited approvals).
    public var durationSeconds: Int?

    /// A choice of your own; a question needs at least one approval and one denial.
    public init(id: String, title: String, answer: Answer, durationSeconds: Int? = nil) {
        self.id = id
        self.title = title
        self.answer = answer
        self.durationSeconds = durationSeconds
    }

    /// The system-preferred choice to approve a permission request.
    public static let approve = PermissionChoice(id: "approve", title: "Approve", answer: .approval)
    /// The system-preferred choice to decline a permission request.
    public static let decline = PermissionChoice(id: "decline", title: "Decline", answer: .denial)
}

/// A question for a guardian. A value type, where Apple's is a class: declare it with
/// `var` to set `expirationDate` after creating it, or pass `expirationDate:`.
public struct PermissionQuestion<Topic: QuestionTopic>: Codable, Sendable, Identifiable {
    /// The question's id: asking again with it resends the same question (or asks again
    /// after it was cancelled or expired).
    public let id: UUID
    /// What the question is about.
    public let topic: Topic
    /// The possible answers; approve and decline unless given.
    public private(set) var choices: [PermissionChoice]
    /// The answer assumed when nobody answers; the most restrictive choice unless given.
    public private(set) var defaultChoice: PermissionChoice
    /// After this date a guardian can no longer answer.
    public var expirationDate: Date?

    /// A question with custom choices (beyond Apple's API, which fixes approve/decline).
    public init(
        id: UUID = UUID(), topic: Topic, choices: [PermissionChoice] = [.approve, .decline],
        defaultChoice: PermissionChoice? = nil, expirationDate: Date? = nil
    ) {
        self.id = id
        self.topic = topic
        self.choices = choices
        self.defaultChoice = defaultChoice ?? choices.first { $0.answer == .denial } ?? .decline
        self.expirationDate = expirationDate
    }
}

extension PermissionQuestion where Topic == CommunicationTopic {
    /// Asks for permission to communicate with the person behind `handle`.
    public init(handle: CommunicationHandle) {
        self.init(handles: [handle])
    }

    /// Asks for permission to communicate with several people.
    public init(handles: [CommunicationHandle]) {
        self.init(communicationTopic: CommunicationTopic(personInformation: handles.map { .init(handle: $0) }))
    }

    /// Asks about a whole topic: people with names and pictures, and the ways to communicate.
    public init(communicationTopic: Topic) {
        self.init(topic: communicationTopic)
    }
}

extension PermissionQuestion where Topic == SignificantAppUpdateTopic {
    /// Asks to keep using the app after a significant update.
    public init(significantAppUpdateTopic: Topic) {
        self.init(topic: significantAppUpdateTopic)
    }
}

/// A guardian's answer to a question.
public struct PermissionResponse<Topic: QuestionTopic>: Sendable {
    /// The choice the guardian made.
    public let choice: PermissionChoice
    /// The original question.
    public let question: PermissionQuestion<Topic>
    /// Who answered (beyond Apple's API).
    public let guardian: String
    /// When the guardian answered (beyond Apple's API).
    public let answeredAt: Date
}

/// An error that can occur when asking a guardian.
public enum AskError: Error, Sendable, LocalizedError, Hashable {
    /// A failure the relay named with a code this library does not know.
    case unknown
    /// Communication limits are off for this child: the app may allow the contact directly.
    case communicationLimitsNotEnabled
    /// The child's family has no guardian to ask (Apple's case, for its own setup that
    /// is missing: contact sync).
    case contactSyncNotSetup
    /// The question breaks a rule (its message says which).
    case invalidQuestion
    /// A failure underneath the API: refused credentials, a relay error of its own kind.
    case systemError(underlyingError: any Error)
    /// The relay cannot be reached, or this member may not ask now: not a child
    /// (`forbidden`), too many questions pending, asking too fast, or the relay busy.
    /// `AskCenter.lastError` says which.
    case notAvailable

    public var errorDescription: String? {
        switch self {
        case .unknown: return "An unknown error response."
        case .communicationLimitsNotEnabled: return "Communication limits aren't enabled for this child."
        case .contactSyncNotSetup: return "No guardian is set up to receive questions."
        case .invalidQuestion: return "The permission question is invalid."
        case .systemError(let e): return "A system error occurred: \(e)"
        case .notAvailable: return "Asking for permission isn't available: the relay cannot be reached, or may not take this question now."
        }
    }

    /// Hashes the case only, as `==` compares.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .unknown: hasher.combine(0)
        case .communicationLimitsNotEnabled: hasher.combine(1)
        case .contactSyncNotSetup: hasher.combine(2)
        case .invalidQuestion: hasher.combine(3)
        case .systemError: hasher.combine(4)
        case .notAvailable: hasher.combine(5)
        }
    }

    /// Compares by case only (`systemError`'s payload is any Error).
    public static func == (a: AskError, b: AskError) -> Bool {
        switch (a, b) {
        case (.unknown, .unknown), (.communicationLimitsNotEnabled, .communicationLimitsNotEnabled),
            (.contactSyncNotSetup, .contactSyncNotSetup), (.invalidQuestion, .invalidQuestion),
            (.systemError, .systemError), (.notAvailable, .notAvailable):
            return true
        default: return false
        }
    }

    /// Maps a relay error code (wire contract §10); a code this library does not know is `.unknown`.
    public init(code: String, message: String) {
        switch code {
        case "communicationLimitsNotEnabled": self = .communicationLimitsNotEnabled
        case "contactSyncNotSetup": self = .contactSyncNotSetup
        case "invalidQuestion", "badRequest": self = .invalidQuestion
        case "forbidden", "tooManyPending", "rateLimited", "busy": self = .notAvailable
        case "unauthorized", "internal", "badFrame", "frameTooLarge", "unknownType", "unsupportedProtocol", "notFound", "conflict",
            "alreadyAnswered", "expired", "cancelled", "invalidChoice":
            self = .systemError(underlyingError: ClientError.relay(code: code, message: message))
        default: self = .unknown
        }
    }
}
