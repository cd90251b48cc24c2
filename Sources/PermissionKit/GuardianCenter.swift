// The guardian's side, which Apple keeps inside Messages: incoming questions of every
// child of the family, answers, limits and known handles, and the questions that
// closed elsewhere (answered by another guardian, cancelled, expired).

import Foundation
import RelayProtocol
import Synchronization

/// A question as a guardian sees it.
public struct GuardianQuestion: Sendable, Identifiable {
    /// What the child asks about.
    public enum Topic: Sendable {
        /// To communicate with people.
        case communication(CommunicationTopic)
        /// To keep using the app after a significant update.
        case significantAppUpdate(SignificantAppUpdateTopic)
    }

    /// The question's id, as the child's app chose it.
    public let id: UUID
    /// The child who asks (a member id).
    public let child: String
    /// What the child asks about.
    public let topic: Topic
    /// The answers to offer, in order; answer with one of them.
    public let choices: [PermissionChoice]
    /// The choice the child's app assumes when nobody answers in time.
    public let defaultChoice: PermissionChoice
    /// When it expires unanswered, if it does.
    public let expirationDate: Date?
    /// When it was first asked.
    public let createdAt: Date
    /// 1 for a first ask; more for a question asked again after it was cancelled or expired.
    public let attempt: Int
    /// `pending`, `answered`, `cancelled` or `expired`.
    public let status: String
    /// For answered questions (in history): the choice, who made it and when.
    public let answer: (choice: PermissionChoice, guardian: String, answeredAt: Date)?

    init?(wire q: JSON) {
        guard let id = q["id"]?.string.flatMap(UUID.init(uuidString:)), let child = q["child"]?.string else { return nil }
        if let c = PermissionQuestion<CommunicationTopic>(wire: q) {
            topic = .communication(c.topic)
            choices = c.choices
            defaultChoice = c.defaultChoice
        } else if let u = PermissionQuestion<SignificantAppUpdateTopic>(wire: q) {
            topic = .significantAppUpdate(u.topic)
            choices = u.choices
            defaultChoice = u.defaultChoice
        } else {
            return nil
        }
        self.id = id
        self.child = child
        expirationDate = q["expirationDate"]?.string.flatMap(Date.init(rfc3339:))
        createdAt = q["createdAt"]?.string.flatMap(Date.init(rfc3339:)) ?? Date()
        attempt = Int(q["attempt"]?.int ?? 1)
        status = q["status"]?.string ?? "pending"
        if let o = q["outcome"], let choice = o["choice"].flatMap(PermissionChoice.init(wire:)) {
            answer = (choice, o["guardian"]?.string ?? "", o["answeredAt"]?.string.flatMap(Date.init(rfc3339:)) ?? Date())
        } else {
            answer = nil
        }
    }
}

/// A question that closed, whoever closed it.
public struct ClosedQuestion: Sendable, Equatable {
    /// The question that closed.
    public let questionID: UUID
    /// The child who had asked it.
    public let child: String
    /// `answered`, `cancelled` or `expired`.
    public let reason: String
    /// The guardian who answered.
    public let by: String?
    /// The choice that guardian made (nil unless answered, or from a relay that does not say).
    public let choice: PermissionChoice?
}

/// Receives a family's questions and answers them.
public final class GuardianCenter: Sendable {
    /// The center configured from the environment (see `RelayConfiguration.fromEnvironment`).
    public static let shared = GuardianCenter(result: RelayConfiguration.result(ProcessInfo.processInfo.environment))

    private let session: MemberSession
    private let hub = Mutex(Hub())

    private struct Hub {
        var questionConsumers: [UUID: Consumer<GuardianQuestion>] = [:]
        var closedConsumers: [UUID: Consumer<ClosedQuestion>] = [:]
        /// No more events can come (closed, refused, or never configured): streams end.
        var ended = false
        /// Events up to here were already in the stream when the center first connected:
        /// their questions are stale or come with `pending()`, so the streams skip them.
        /// What a reconnection replays came while the center was away, and is news.
        var replayedUpTo: Int64?
    }

    /// A center for an explicit identity; without one every operation fails at once with
    /// `AskError.systemError` and every stream ends.
    public convenience init(configuration: RelayConfiguration?) {
        self.init(result: configuration.map { .success($0) } ?? .failure(.missingCredentials("no configuration was given")))
    }

    private init(result configuration: Result<RelayConfiguration, ClientError>) {
        let box = WeakBox<GuardianCenter>()
        session = MemberSession(
            configuration: configuration,
            onWelcome: { w in box.value?.hub.withLock { $0.replayedUpTo = $0.replayedUpTo ?? w["head"]?.int ?? 0 } },
            onEvent: { e in box.value?.handle(e) }, onEnd: { box.value?.end() })
        box.value = self
        session.start()  // only now can an event reach `handle`
    }

    /// Disconnects for good; returns once everything received has been recorded as processed.
    public func close() async {
        await session.close()
    }

    /// Incoming questions: first those pending now, then each new one (also re-asks).
    /// Like `closedQuestions`, it carries what happens from now on; `history` tells the past.
    /// It ends when the center can receive no more (closed, refused, or not configured).
    public func questions() -> AsyncStream<GuardianQuestion> {
        let (stream, continuation) = AsyncStream<GuardianQuestion>.makeStream()
        let key = UUID()
        let seen = Mutex(Set<String>())
        let deliver: @Sendable (GuardianQuestion) -> Void = { q in
            if seen.withLock({ $0.insert("\(q.id)#\(q.attempt)").inserted }) { continuation.yield(q) }
        }
        let ended = hub.withLock { h in
            if !h.ended { h.questionConsumers[key] = Consumer(deliver, continuation.finish) }
            return h.ended
        }
        if ended {
            continuation.finish()
            return stream
        }
        let listing = Task { [weak self] in
            // Asked again while the relay cannot be reached (a guardian's app started before
            // it), until it answers or the stream or the center ends.
            while !Task.isCancelled {
                do {
                    guard let list = try await self?.pending() else { return }
                    for q in list { deliver(q) }
                    return
                } catch AskError.notAvailable {
                    try? await Task.sleep(for: .seconds(1))
                } catch {
                    return  // refused, closed or not configured: the stream ends with the center
                }
            }
        }
        continuation.onTermination = { [weak self] _ in
            listing.cancel()
            self?.hub.withLock { _ = $0.questionConsumers.removeValue(forKey: key) }
        }
        return stream
    }

    /// Questions closed anywhere: answered (by whom), cancelled by the child, or expired.
    public func closedQuestions() -> AsyncStream<ClosedQuestion> {
        let (stream, continuation) = AsyncStream<ClosedQuestion>.makeStream()
        let key = UUID()
        let ended = hub.withLock { h in
            if !h.ended { h.closedConsumers[key] = Consumer({ continuation.yield($0) }, continuation.finish) }
            return h.ended
        }
        if ended { continuation.finish() }
        continuation.onTermination = { [weak self] _ in self?.hub.withLock { _ = $0.closedConsumers.removeValue(forKey: key) } }
        return stream
    }

    /// Answers with one of the question's choices. The first answer wins; a later one throws
    /// `RelayError` with code `alreadyAnswered` (and `answeredBy`).
    public func answer(_ questionID: UUID, with choiceID: String) async throws {
        _ = try await call(["type": "answer", "questionId": .string(questionID.uuidString), "choice": .string(choiceID)])
    }

    /// Answers `question` with `choice`, one of its `choices`, as `answer(_:with:)` by ids.
    public func answer(_ question: GuardianQuestion, with choice: PermissionChoice) async throws {
        try await answer(question.id, with: choice.id)
    }

    /// The family's pending questions (of one child, if given), oldest first: all of them,
    /// over as many replies as the relay needs to send them.
    public func pending(child: String? = nil) async throws -> [GuardianQuestion] {
        var req: JSONObject = ["type": "pending"]
        if let child { req["child"] = .string(child) }
        return try await session.list(req).compactMap(GuardianQuestion.init(wire:))
    }

    /// Questions newest first, with their status and answer.
    public func history(child: String? = nil, limit: Int = 100) async throws -> [GuardianQuestion] {
        var req: JSONObject = ["type": "history"]
        if let child { req["child"] = .string(child) }
        return try await session.list(req, limit: limit).compactMap(GuardianQuestion.init(wire:))
    }

    /// Turns a child's communication limits on or off. Off, the child's app may allow
    /// contacts without asking; the child's sessions hear of the change.
    public func setCommunicationLimits(for child: String, enabled: Bool) async throws {
        _ = try await call(["type": "setLimits", "child": .string(child), "enabled": .bool(enabled)])
    }

    /// Makes handles known for a child; returns how many the child has now.
    @discardableResult
    public func addKnownHandles(_ handles: [CommunicationHandle], for child: String) async throws -> Int {
        Int(
            try await call(["type": "addKnownHandles", "child": .string(child), "handles": .array(handles.map(\.wire))])["known"]?.int ?? 0)
    }

    /// Makes handles unknown for a child (asking about them again); returns how many the
    /// child has now.
    @discardableResult
    public func removeKnownHandles(_ handles: [CommunicationHandle], for child: String) async throws -> Int {
        Int(
            try await call(["type": "removeKnownHandles", "child": .string(child), "handles": .array(handles.map(\.wire))])["known"]?.int
                ?? 0)
    }

    /// Whether the relay can be reached now.
    public var connectionState: ConnectionState { session.state }

    /// Why the last attempt to connect failed, or why the relay refused this client
    /// (`connectionState` `unavailable` or `refused`).
    public var connectionError: ClientError? { session.lastError }

    /// Why the last request failed, in full: the relay's error code and message, or why the
    /// relay could not be reached or the center has no configuration.
    public var lastError: ClientError? { session.lastRequestError }

    /// The connection state now and on every change.
    public func connectionStates() -> AsyncStream<ConnectionState> { session.states() }

    /// Ends every stream: nothing more can come.
    private func end() {
        let open = hub.withLock { h -> [@Sendable () -> Void] in
            h.ended = true
            defer { (h.questionConsumers, h.closedConsumers) = ([:], [:]) }
            return h.questionConsumers.values.map(\.finish) + h.closedConsumers.values.map(\.finish)
        }
        for finish in open { finish() }
    }

    /// How this guardian's family reaches its other devices: nil when all of it is on this
    /// relay, else whether the hub is reachable now (an answer waits for it while it is not).
    public func familyLink() async throws -> FamilyLink? { try await FamilyLink.read(session) }

    func call(_ req: JSONObject) async throws -> JSONObject { try await session.call(req) }

    /// One event of the guardian's stream, recorded as processed before the app's streams
    /// get it (an app stopped right after it showed a question is not shown it again).
    private func handle(_ e: JSONObject) {
        guard let seq = e["seq"]?.int, !session.progress.isDone(seq) else { return }
        session.done(seq)
        let replayed = hub.withLock { seq <= $0.replayedUpTo ?? 0 }
        switch replayed ? nil : e["type"]?.string {
        case "question":
            if let q = e["question"].flatMap(GuardianQuestion.init(wire:)) {
                for c in hub.withLock({ $0.questionConsumers.values.map(\.yield) }) { c(q) }
            }
        case "questionClosed":
            if let id = e["questionId"]?.string.flatMap(UUID.init(uuidString:)) {
                let closed = ClosedQuestion(
                    questionID: id, child: e["child"]?.string ?? "", reason: e["reason"]?.string ?? "", by: e["by"]?.string,
                    choice: e["choice"].flatMap(PermissionChoice.init(wire:)))
                for c in hub.withLock({ $0.closedConsumers.values.map(\.yield) }) { c(closed) }
            }
        default: break
        }
    }
}
