// Apple's CommunicationLimits: which handles a guardian approved for this child.

import Foundation

/// The communication limits of the child this app runs for.
public final class CommunicationLimits: Sendable {
    /// The limits of the child configured in the environment (through `AskCenter.shared`).
    public static let current = CommunicationLimits(center: .shared)

    private let center: AskCenter

    /// The limits of the child `center` speaks for.
    public init(center: AskCenter) { self.center = center }

    /// Whether the relay knows `handle` for this child; false when it cannot be asked.
    public func isKnownHandle(_ handle: CommunicationHandle) async -> Bool {
        await knownHandles(in: [handle]).contains(handle)
    }

    /// The subset of `handles` known for this child (empty when the relay cannot be asked).
    public func knownHandles(in handles: Set<CommunicationHandle>) async -> Set<CommunicationHandle> {
        (try? await center.knownHandles(in: handles)) ?? []
    }

    /// Every response to communication questions, as `AskCenter.responses(for:)` gives them
    /// (Apple's earlier spelling, which it has since deprecated for that one).
    public var updates: some AsyncSequence<PermissionResponse<CommunicationTopic>, Never> & Sendable {
        center.responses(for: CommunicationTopic.self)
    }

    /// Asks the child's guardians, as `AskCenter.ask` does (Apple's earlier spelling).
    public func ask(_ question: PermissionQuestion<CommunicationTopic>) async throws {
        try await center.ask(question)
    }

    /// Whether the child's guardians have communication limits on (beyond Apple's API).
    public func isEnabled() async throws -> Bool {
        try await center.limitsEnabled()
    }
}
