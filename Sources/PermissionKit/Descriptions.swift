// How the public types print: one readable line each, in the words the programs use
// (`phone:+15550100`), instead of the module-qualified dump Swift prints by default.

import Foundation

extension CommunicationHandle: CustomStringConvertible {
    /// `phone:+15550100`, `email:kim@example.org` or `custom:kim42`.
    public var description: String {
        switch kind {
        case .phoneNumber: "phone:\(value)"
        case .emailAddress: "email:\(value)"
        case .custom: "custom:\(value)"
        }
    }
}

extension CommunicationTopic.PersonInformation: CustomStringConvertible {
    /// `Kim Lee (phone:+15550100)`, or the handle alone when there is no name.
    public var description: String {
        let parts = [nameComponents?.givenName, nameComponents?.middleName, nameComponents?.familyName]
        let name = parts.compactMap { $0 }.joined(separator: " ")
        return name.isEmpty ? handle.description : "\(name) (\(handle))"
    }
}

extension CommunicationTopic: CustomStringConvertible {
    /// `message, audioCall with Kim Lee (phone:+15550100)`.
    public var description: String {
        let ways = actions.isEmpty ? "communicate" : actions.map(\.rawValue).sorted().joined(separator: ", ")
        return "\(ways) with \(personInformation.map(\.description).joined(separator: ", "))"
    }
}

extension PermissionChoice: CustomStringConvertible {
    /// `approve "Approve" (approval)`, or `hour "For an hour" (approval for 3600 s)`.
    public var description: String {
        "\(id) \"\(title)\" (\(answer.rawValue)\(durationSeconds.map { " for \($0) s" } ?? ""))"
    }
}

extension PermissionQuestion: CustomStringConvertible {
    /// `question 0B7E…: message with Kim Lee (phone:+15550100); choices approve, decline`.
    public var description: String {
        let expiry = expirationDate.map { "; expires \($0.rfc3339)" } ?? ""
        return "question \(id): \(topic); choices \(choices.map(\.id).joined(separator: ", "))\(expiry)"
    }
}

extension PermissionResponse: CustomStringConvertible {
    /// `approve "Approve" (approval) by sam, to question 0B7E…`.
    public var description: String { "\(choice) by \(guardian), to question \(question.id)" }
}

extension GuardianQuestion: CustomStringConvertible {
    /// `alex asks (pending): message with Kim Lee (phone:+15550100); choices approve, decline`.
    public var description: String {
        let about: String
        switch topic {
        case .communication(let t): about = t.description
        case .significantAppUpdate(let u): about = "keep using the app after an update: \(u.description)"
        }
        return "\(child) asks (\(status)): \(about); choices \(choices.map(\.id).joined(separator: ", "))"
    }
}

extension QuestionOutcome: CustomStringConvertible {
    /// `question 0B7E… expired (default choice: decline)`.
    public var description: String {
        "question \(questionID) \(reason.rawValue)\(defaultChoice.map { " (default choice: \($0.id))" } ?? "")"
    }
}
