// The child's side: ask, cancel, and the stream of responses, as in Apple's AskCenter,
// plus what Apple leaves silent: outcomes (expired, cancelled), the list of this
// child's questions, and the state of each handle.

import Foundation
import RelayProtocol
import Synchronization

/// The relay refused a request: its error code and message (beyond Apple's API).
public struct RelayError: Error, Sendable, CustomStringConvertible, LocalizedError {
    /// The contract's error code, e.g. `tooManyPending` (protocol.md lists them all).
    public let code: String
    /// The relay's explanation, for people.
    public let message: String
    /// Extra fields of the error frame (e.g. `answeredBy` with `alreadyAnswered`).
    public let details: [String: String]
    public var description: String { "\(code): \(message)" }
    /// What `localizedDescription` says: the description.
    public var errorDescription: String? { description }

    /// An error as the relay would send it (for tests and stand-ins).
    public init(code: String, message: String, details: [String: String] = [:]) {
        self.code = code
        self.message = message
        self.details = details
    }

    /// The same failure as Apple's error type.
    public var askError: AskError { AskError(code: code, message: message) }
}

/// What `submit` tells about an accepted question.
public struct AskReceipt: Sendable, Equatable {
    /// The question's id (the one it was asked with).
    public let questionID: UUID
    /// `pending`, or `answered` for a resend of an answered question.
    public let status: String
    /// 1 for a first ask; one more each time a cancelled or expired question is asked again.
    public let attempt: Int
    /// Every handle of the question is already known.
    public let allKnown: Bool
}

/// How a question ended without a response (Apple's API stays silent on these).
public struct QuestionOutcome: Sendable, Equatable {
    /// Why it ended: withdrawn by the child (any of its apps), or unanswered in time.
    public enum Reason: String, Sendable {
        /// Withdrawn by the child: by any of its apps, on any of its devices.
        case cancelled
        /// Unanswered by its expiration date: its default choice stands.
        case expired
    }
    /// The question that ended.
    public let questionID: UUID
    /// Why it ended.
    public let reason: Reason
    /// For an expired question: the choice to assume.
    public let defaultChoice: PermissionChoice?
}

/// One of this child's questions as the relay holds it.
public struct QuestionSummary: Sendable {
    /// The question's id.
    public let id: UUID
    /// `communication` or `significantAppUpdate`.
    public let topicKind: String
    /// `pending`, `answered`, `cancelled` or `expired`.
    public let status: String
    /// How many times it was asked (a cancelled or expired question may be asked again).
    public let attempt: Int
    /// When it was first asked.
    public let createdAt: Date
    /// When it expires, if it does.
    public let expirationDate: Date?
    /// The handles of the people it asks about (none for an app update).
    public let handles: [CommunicationHandle]
    /// The ways to communicate it asks for (empty: `communicate`, or an app update).
    public let actions: Set<CommunicationTopic.Action>
    /// For an app update: what the update changes (nil for a communication question).
    public let updateDescription: String?
    /// The answers it offers.
    public let choices: [PermissionChoice]
    /// The one taken as the answer when it expires.
    public let defaultChoice: PermissionChoice?
    /// When answered: the choice, who chose it and when.
    public let choice: PermissionChoice?
    /// When answered: the guardian who answered.
    public let guardian: String?
    /// When answered: when.
    public let answeredAt: Date?
}

/// Where a handle stands for this child.
public enum HandleState: Sendable, Equatable {
    /// Never asked about, or forgotten.
    case notDetermined
    /// A question about it waits for a guardian.
    case pending
    /// Approved; `until` is when it stops being known (the timed approval that ends last),
    /// nil when it is known for good (or when a relay older than `timed` does not say).
    case approved(until: Date?)
    /// The last question about it was denied.
    case denied
    /// The last question about it expired unanswered, or its time-limited approval ran out.
    case expired
}

/// Asks guardians for permission and delivers their responses.
public final class AskCenter: Sendable {
    /// The center configured from the environment (see `RelayConfiguration.fromEnvironment`).
    public static let shared = AskCenter(environment: ProcessInfo.processInfo.environment)

    private let session: MemberSession
    private var progress: EventProgress { session.progress }
    private let hub = Mutex(Hub())

    private struct Hub {
        /// The app's open streams of responses (by topic) and of outcomes: each takes an
        /// event (false when the stream has ended, or cannot read it) and ends.
        var responseConsumers: [String: [UUID: EventConsumer]] = [:]
        var outcomeConsumers: [UUID: EventConsumer] = [:]
        /// No more events can come (closed, refused, or never configured): streams end.
        var ended = false
        /// Responses and outcomes no open stream has; not yet processed.
        var held: [Int64: JSONObject] = [:]
        /// Events given to streams: how many of those streams are not done with each, and
        /// whether a loop had it. Processed once none is left.
        var outstanding: [Int64: (event: JSONObject, streams: Int, handed: Bool)] = [:]
        /// Awaited questions whose response or closing came through the stream in this run
        /// and is not processed yet, and those recovered in it (`recover`): neither is
        /// recovered (again).
        var closedHere: Set<String> = []
        var recovered: Set<String> = []
        /// Asks sent and not answered yet, by question; and the questions asked since the
        /// check under way began: a listing may be older than their asking.
        var asking: [String: Int] = [:]
        var askedSinceCheck: Set<String> = []
        /// Awaited questions a check left for the next because they were being asked: their
        /// ask's reply starts one.
        var leftByCheck: Set<String> = []
        /// The next seq for a recovered closing: below 1, never one of the stream's.
        var nextRecovered: Int64 = 0
        /// Events of a stream the relay started anew (its data reset, a backup restored) with
        /// the seq of one from before that the app still has: each waits until that one is
        /// processed, so that no two events in hand share a seq.
        var behindStale: [Int64: JSONObject] = [:]
        /// The relay is being asked how the awaited questions stand (`checkAwaited`); and
        /// another welcome came meanwhile, so it is asked again once that is done.
        var checking = false
        var checkAgain = false
    }

    /// A center for an explicit identity.
    public convenience init(configuration: RelayConfiguration) {
        self.init(result: .success(configuration))
    }

    convenience init(environment: [String: String]) {
        self.init(result: RelayConfiguration.result(environment))
    }

    /// Without a configuration every operation fails at once with `AskError.systemError`
    /// saying why, and every stream ends.
    private init(result configuration: Result<RelayConfiguration, ClientError>) {
        let box = WeakBox<AskCenter>()
        session = MemberSession(
            configuration: configuration, setup: { box.value?.subscribeFrame.map { [$0] } ?? [] },
            onWelcome: { _ in box.value?.checkAwaitedIfUnsure() }, onEvent: { e in box.value?.handle(e) },
            onEnd: { box.value?.end() })
        box.value = self
        session.start()  // only now can an event reach `handle`
    }

    /// Disconnects for good; returns once what the app's loops have processed is recorded
    /// and acknowledged. What the loops of the calling task took counts as processed (also
    /// what one left with `break` in top-level code took, whose iterator lives on), so call
    /// it once that is handled; a response a loop of another task still handles is handed
    /// again at the next start.
    public func close() async {
        let task = AppDelivery<Never>.currentTask
        let open = hub.withLock { h in h.responseConsumers.values.flatMap(\.values) + h.outcomeConsumers.values }
        for consumer in open { consumer.settle(task) }
        releaseUnwantedOutcomes()
        await session.close()
    }

    // MARK: - Asking

    /// Sends the question to the child's guardians; returns once the relay has stored it.
    /// A resend of the same question (same id) is safe and asks nobody twice; while it is
    /// pending or answered the first version stands, so a changed question needs a new id.
    public func ask<Topic: QuestionTopic>(_ question: PermissionQuestion<Topic>) async throws {
        do {
            _ = try await submit(question)
        } catch let e as RelayError {
            throw e.askError
        }
    }

    /// `ask`, with the relay's receipt and its error codes and messages (beyond Apple's API).
    @discardableResult
    public func submit<Topic: QuestionTopic>(_ question: PermissionQuestion<Topic>) async throws -> AskReceipt {
        guard let wire = question.wire else {
            let why = "the relay takes questions about CommunicationTopic and SignificantAppUpdateTopic, not \(Topic.self)"
            throw session.failed(AskError.invalidQuestion, .relay(code: "invalidQuestion", message: why))
        }
        register([Topic.id])  // the response must reach this session, in this run or a later one
        let id = question.id.uuidString
        let undo = session.durable ? awaitClosing(of: id) : nil
        defer { if undo != nil { askAnswered(id) } }
        let r: JSONObject
        do {
            r = try await call(["type": "ask", "question": wire])
        } catch {
            // Refused (nothing stored), or not known to be stored: the app was told it failed.
            undo?()
            throw error
        }
        if r["status"]?.string != "pending" { undo?() }  // a resend of one no longer pending
        return AskReceipt(
            questionID: r["questionId"]?.string.flatMap(UUID.init(uuidString:)) ?? question.id,
            status: r["status"]?.string ?? "pending", attempt: Int(r["attempt"]?.int ?? 1),
            allKnown: r["allKnown"]?.bool ?? false)
    }

    /// Withdraws a pending question; the guardians are told it is closed.
    public func cancel<Topic: QuestionTopic>(_ question: PermissionQuestion<Topic>) async throws {
        try await cancel(questionID: question.id)
    }

    /// Withdraws a pending question by its id (say, one asked by an earlier run of the app).
    public func cancel(questionID: UUID) async throws {
        _ = try await call(["type": "cancel", "questionId": .string(questionID.uuidString)])
    }

    // MARK: - Streams

    /// Every response to questions of this topic not processed yet: from now on, those
    /// that came while the app was not running, and those another loop of this process
    /// still handles. Each loop over it gets its own complete sequence; one made and never
    /// iterated takes nothing (holds nothing back). Unlike Apple's, it ends: when
    /// the center is closed, has no credentials, or the relay refused them
    /// (`connectionError` says which).
    ///
    /// A response counts as processed once the loop that took it asks for the next one
    /// (or ends, or its task closes the center), and every other loop it went to too: an
    /// app stopped at any moment gets again, at its next start, the response it was
    /// handling, and never loses one.
    public func responses<Topic: QuestionTopic>(for topicType: Topic.Type)
        -> some AsyncSequence<PermissionResponse<Topic>, Never> & Sendable
    {
        register([Topic.id])
        return open(Topic.id, PermissionResponse<Topic>.init(event:))
    }

    /// Questions that closed without a response, cancelled (here or on another device) or
    /// expired, not processed yet: as `responses(for:)` gives responses. Processed as
    /// responses are: once every loop that took one asks for the next. Ends as
    /// `responses(for:)` does.
    public func outcomes() -> some AsyncSequence<QuestionOutcome, Never> & Sendable {
        progress.noteOutcomesUsed()
        register([CommunicationTopic.id, SignificantAppUpdateTopic.id])
        return open(nil, QuestionOutcome.init(event:))
    }

    /// A stream of the responses of `topic`, or of the outcomes (nil): the events held
    /// for it and those other loops still handle, then each new one, in order. It takes
    /// them once a loop starts on it: a sequence made and never iterated holds none back
    /// (an event counts as processed only once every stream it went to is done with it).
    private func open<Element: Sendable>(_ topic: String?, _ read: @escaping @Sendable (JSONObject) -> Element?) -> LazyDelivery<
        Element
    > {
        LazyDelivery { self.openNow(topic, read) }
    }

    private func openNow<Element: Sendable>(_ topic: String?, _ read: @escaping @Sendable (JSONObject) -> Element?) -> AppDelivery<
        Element
    > {
        let key = UUID()
        let stream = DeliveryStream<Element>(
            settled: { [weak self] in self?.settled($0, handed: true) },
            returned: { [weak self] in self?.settled($0, handed: false) },
            ended: { [weak self] in
                self?.hub.withLock { h in
                    if let topic { h.responseConsumers[topic]?[key] = nil } else { h.outcomeConsumers[key] = nil }
                }
            })
        let take: @Sendable (Int64, JSONObject) -> EventConsumer.Taken = { seq, e in
            guard let element = read(e) else { return .unreadable }
            return stream.give(seq, element) ? .given : .ended
        }
        var notGiven: [(seq: Int64, unreadable: Bool)] = []
        let ended = hub.withLock { h -> Bool in
            guard !h.ended else { return true }
            let consumer = EventConsumer(take: take, finish: stream.finish, settle: stream.settle(takenBy:))
            if let topic { h.responseConsumers[topic, default: [:]][key] = consumer } else { h.outcomeConsumers[key] = consumer }
            // Given while the hub is locked: nothing new overtakes them.
            let mine = { (e: JSONObject) in
                topic.map { Self.topicKind(of: e) == $0 && e["type"]?.string == "response" } ?? (e["type"]?.string == "questionClosed")
            }
            // What is not processed yet: held for a stream (what came while the app was away
            // is replayed as the center is made, before the app can ask for it), or in
            // another loop's hands. What a loop is done with is not handed again.
            for seq in Set(h.outstanding.keys).union(h.held.keys).sorted() {
                guard let e = h.held[seq] ?? h.outstanding[seq]?.event, mine(e) else { continue }
                if let held = h.held.removeValue(forKey: seq) { h.outstanding[seq] = (held, 0, false) }
                h.outstanding[seq]!.streams += 1
                let taken = take(seq, e)
                if taken != .given { notGiven.append((seq, taken == .unreadable)) }
            }
            return false
        }
        // An event a stream cannot read is done with at once: there is nothing to show.
        for n in notGiven { settled(n.seq, handed: n.unreadable) }
        if ended { stream.finish() }
        return stream.sequence
    }

    /// A stream is done with `seq`: its loop handled it, or it ended before its loop took it.
    private func settled(_ seq: Int64, handed: Bool) {
        let (mark, next) = hub.withLock { h -> (Int64?, JSONObject?) in
            guard var o = h.outstanding[seq] else { return (nil, nil) }  // processed before this stream had it
            o.streams -= 1
            o.handed = o.handed || handed
            guard o.streams <= 0 else {
                h.outstanding[seq] = o
                return (nil, nil)
            }
            h.outstanding[seq] = nil
            // No loop had it (every stream ended first): it waits for the next stream.
            guard o.handed else {
                h.held[seq] = o.event
                return (nil, nil)
            }
            // Processed before the lock is let go: a replay of it coming meanwhile is not handed again.
            let closed = Self.closedQuestion(of: o.event)
            // What it was kept for is done, unless another closing of it is in hand.
            if let closed, Self.closing(of: closed, inHandIn: h) == nil { h.closedHere.remove(closed) }
            return (session.progress.markDone(seq, closing: closed), h.behindStale.removeValue(forKey: seq))
        }
        if let mark { session.acknowledge(mark) }
        if let next { handle(next) }
    }

    /// Whether the relay can be reached now.
    public var connectionState: ConnectionState { session.state }

    /// Why the last attempt to connect failed, or why the relay refused this client
    /// (`connectionState` `unavailable` or `refused`).
    public var connectionError: ClientError? { session.lastError }

    /// Why the last request failed, in full: the relay's error code and message (an
    /// `invalidQuestion`'s reason, say, which `AskError` cannot carry), or why the relay could
    /// not be reached or the center has no configuration.
    public var lastError: ClientError? { session.lastRequestError }

    /// The connection state now and on every change.
    public func connectionStates() -> AsyncStream<ConnectionState> { session.states() }

    // MARK: - Bookkeeping the relay does for the app

    /// This child's questions, newest first, optionally only those with `status`.
    public func questions(status: String? = nil) async throws -> [QuestionSummary] {
        var req: JSONObject = ["type": "questions"]
        if let status { req["status"] = .string(status) }
        return try await session.list(req).compactMap(QuestionSummary.init(wire:))
    }

    /// One of this child's questions by its id, or nil if the relay holds none with it.
    public func question(id: UUID) async throws -> QuestionSummary? {
        let named = { (q: JSON) in q["id"]?.string.flatMap(UUID.init(uuidString:)) == id }
        return try await session.list(["type": "questions"], until: named).first(where: named).flatMap(QuestionSummary.init(wire:))
    }

    /// Where `handle` stands: known, waiting for an answer, denied, expired, or never asked.
    public func state(for handle: CommunicationHandle) async throws -> HandleState {
        guard let key = handle.normalized else { return .notDetermined }
        // Known: until when the relay says (timed approvals), whichever question made it so.
        let reply = try await call(["type": "knownHandles", "handles": [handle.wire]])
        if reply["known"]?.array?.isEmpty == false {
            return .approved(until: reply["timed"]?.array?.first?["until"]?.string.flatMap(Date.init(rfc3339:)))
        }
        // Newest first: the pages after the one that names the handle cannot change the answer.
        let asks = { (q: QuestionSummary) in q.handles.contains { $0.normalized == key } }
        let latest = try await session.list(["type": "questions"]) { QuestionSummary(wire: $0).map(asks) ?? false }
            .compactMap(QuestionSummary.init(wire:)).first(where: asks)
        switch (latest?.status, latest?.choice?.answer) {
        case ("pending"?, _): return .pending
        case ("answered"?, .denial?): return .denied
        case ("answered"?, .approval?): return .expired  // a time-limited approval that ran out
        case ("expired"?, _): return .expired
        default: return .notDetermined
        }
    }

    /// How this child's family reaches its other devices: nil when all of it is on this
    /// relay, else whether the hub is reachable now (a question waits here while it is not).
    public func familyLink() async throws -> FamilyLink? { try await FamilyLink.read(session) }

    /// Whether this child's communication limits are on.
    public func limitsEnabled() async throws -> Bool {
        try await call(["type": "limits"])["enabled"]?.bool ?? true
    }

    /// The subset of `handles` the relay knows for this child.
    public func knownHandles(in handles: Set<CommunicationHandle>) async throws -> Set<CommunicationHandle> {
        let list = Array(handles)
        let r = try await call(["type": "knownHandles", "handles": .array(list.map(\.wire))])
        let known = Set((r["known"]?.array ?? []).compactMap(CommunicationHandle.init(wire:)))
        return Set(list.filter { h in h.normalized.map(known.contains) ?? false })
    }

    // MARK: - Internals

    /// Ends every stream: nothing more can come.
    private func end() {
        let open = hub.withLock { h -> [@Sendable () -> Void] in
            h.ended = true
            defer { (h.responseConsumers, h.outcomeConsumers) = ([:], [:]) }
            return h.responseConsumers.values.flatMap(\.values).map(\.finish) + h.outcomeConsumers.values.map(\.finish)
        }
        for finish in open { finish() }
    }

    func call(_ req: JSONObject) async throws -> JSONObject { try await session.call(req) }

    /// Subscribes this session to more topics; a subscription never shrinks (see EventProgress).
    private func register(_ topics: Set<String>) {
        // Queued while the set is locked: a request that needs these topics and is sent
        // after this call (by any thread) goes out after the subscription, not before it.
        progress.register(topics) { session.sendLater(Self.subscribe($0)) }
    }

    /// The session's subscription, sent after every hello; nil before anything was registered.
    var subscribeFrame: JSONObject? {
        let topics = progress.topics
        return topics.isEmpty ? nil : Self.subscribe(topics)
    }

    private static func subscribe(_ topics: Set<String>) -> JSONObject {
        ["type": "subscribe", "topics": .array(topics.sorted().map(JSON.string))]  // the connection gives it its id
    }

    static func topicKind(of event: JSONObject) -> String? { event["question"]?["topic"]?["kind"]?.string }

    /// One event of the child's stream, on the connection's thread, in order. A response or
    /// outcome goes to the app's open streams for it, and is processed once each of them
    /// is done with it; one that no stream takes yet is held for the first that will.
    private func handle(_ e: JSONObject) {
        guard let seq = e["seq"]?.int else { return }
        if progress.isDone(seq) { return }
        if progress.isStale(seq) {
            let waits = hub.withLock { h in
                guard h.outstanding[seq] != nil || h.held[seq] != nil else { return false }
                h.behindStale[seq] = e
                return true
            }
            if waits { return }
            progress.forgetStale(seq)  // the one from before is not in hand any more
        }
        let type = e["type"]?.string
        guard type == "response" || type == "questionClosed" else { return session.done(seq) }
        if type == "questionClosed" && QuestionOutcome(event: e) == nil { return session.done(seq) }
        let consumers = hub.withLock { h -> [EventConsumer]? in
            // Replayed after a reconnect while the app still has it, or while it waits for a
            // stream: it is handed once (again only to an app restarted before it was done).
            // Processed meanwhile (since `isDone` above): not handed again.
            guard h.outstanding[seq] == nil, h.held[seq] == nil, !progress.isDone(seq) else { return [] }
            if let q = Self.closedQuestion(of: e) {
                if h.recovered.contains(q) { return nil }  // handed already, recovered after a gap
                if progress.awaiting.contains(q) { h.closedHere.insert(q) }
            }
            return give(seq, e, &h)
        }
        guard let consumers else { return session.done(seq) }
        for c in consumers {
            let taken = c.take(seq, e)
            if taken != .given { settled(seq, handed: taken == .unreadable) }
        }
    }

    /// Lists a response or outcome for the app's open streams of it (returned: each is to
    /// be given it), or holds it for the first that opens.
    private func give(_ seq: Int64, _ e: JSONObject, _ h: inout Hub) -> [EventConsumer] {
        let list =
            e["type"]?.string == "response"
            ? (h.responseConsumers[Self.topicKind(of: e) ?? ""]?.values).map(Array.init) ?? [] : Array(h.outcomeConsumers.values)
        guard !list.isEmpty else {
            h.held[seq] = e
            return []
        }
        h.outstanding[seq] = (e, list.count, false)
        return list
    }

    /// Awaits the closing of a question about to be asked (from before it is sent: its
    /// response may come before the reply does); returns what undoes that, for an ask that
    /// asks nothing new.
    private func awaitClosing(of id: String) -> @Sendable () -> Void {
        hub.withLock { h in
            h.asking[id, default: 0] += 1
            if h.checking { h.askedSinceCheck.insert(id) }
            let was = progress.awaiting.contains(id)
            // Asked again after it closed: its closing, if any, is of the last asking.
            let (brought, recovered) = (h.closedHere.remove(id) != nil, h.recovered.remove(id) != nil)
            let inHand = was ? Self.closing(of: id, inHandIn: h) : nil
            if let inHand { progress.askedAgain(id, closingInHand: inHand) }
            progress.awaitClosing(of: id)
            return { [self] in
                hub.withLock { h in
                    if recovered { h.recovered.insert(id) }
                    if let inHand {
                        // The last asking's closing, processed meanwhile, found this one awaited:
                        // without it, nothing is awaited.
                        progress.undoAskAgain(id, closingInHand: inHand)
                        if brought && Self.closing(of: id, inHandIn: h) != nil { h.closedHere.insert(id) }
                    } else if !was {
                        progress.stopAwaiting(id)
                    } else if brought {
                        h.closedHere.insert(id)
                    }
                }
            }
        }
    }

    /// The ask of `id` has its reply (or failed).
    private func askAnswered(_ id: String) {
        let checkAgain = hub.withLock { h in
            let left = (h.asking[id] ?? 1) - 1
            h.asking[id] = left > 0 ? left : nil
            return h.leftByCheck.remove(id) != nil
        }
        if checkAgain { checkAwaitedIfUnsure() }
    }

    /// The seq of a closing of `id` the app has not processed yet, held or in its hands.
    private static func closing(of id: String, inHandIn h: Hub) -> Int64? {
        h.held.first { closedQuestion(of: $0.value) == id }?.key ?? h.outstanding.first { closedQuestion(of: $0.value.event) == id }?.key
    }

    /// The question a response or `questionClosed` closes.
    private static func closedQuestion(of e: JSONObject) -> String? {
        (e["questionId"] ?? e["question"]?["id"])?.string.flatMap(UUID.init(uuidString:))?.uuidString
    }

    /// After a gap (or a relay whose data was reset), until the relay has been asked: starts
    /// asking how the awaited questions stand.
    private func checkAwaitedIfUnsure() {
        guard progress.unsure else { return }
        let start = hub.withLock { h -> Bool in
            h.checkAgain = h.checking
            h.checking = true
            return !h.checkAgain
        }
        guard start else { return }
        Task {
            repeat {
                await checkAwaited()
            } while hub.withLock { h in
                (h.checking, h.checkAgain) = (h.checkAgain, false)
                return h.checking
            }
        }
    }

    /// Asks the relay for this child's questions until every awaited one is listed, and
    /// recovers the response or closing of those finished whose event the stream did not
    /// bring in this run: a gap dropped it, or an earlier run recovered it and stopped
    /// before its loop was done with it. Those the relay no longer has are awaited no more.
    /// A failure leaves it to the next welcome.
    private func checkAwaited() async {
        let gaps = progress.gaps
        let askingAtStart = hub.withLock { h in
            h.askedSinceCheck = []
            return Set(h.asking.keys)
        }
        let awaited = progress.awaiting
        guard !awaited.isEmpty else { return progress.checked(gone: [], sure: true, gaps: gaps) }
        var listed = 0
        let want = Set(awaited)
        let questions: [JSON]
        do {
            // Newest first: the awaited ones are among the newest, as a rule.
            questions = try await session.list(["type": "questions"]) { q in
                if let id = Self.closedQuestion(of: ["question": q]), want.contains(id) { listed += 1 }
                return listed == want.count
            }
        } catch {
            return
        }
        var byID: [String: JSON] = [:]
        for q in questions {
            if let id = Self.closedQuestion(of: ["question": q]), want.contains(id) { byID[id] = q }
        }
        // Those asked while the listing was made may be missing from it, or listed as they
        // were before: they are left for the next check.
        let asked = hub.withLock { h in
            let asked = askingAtStart.union(h.askedSinceCheck).union(h.asking.keys)
            // Left for the next check: once their asks have replies (those that have already,
            // at once).
            let left = asked.intersection(want)
            h.leftByCheck.formUnion(left.filter { h.asking[$0] != nil })
            if left.contains(where: { h.asking[$0] == nil }) { h.checkAgain = true }
            return asked
        }
        var sure = asked.isDisjoint(with: want)
        for id in awaited where !asked.contains(id) {
            guard let q = byID[id], let e = Self.closing(of: q) else { continue }
            if !recover(id, e) { sure = false }
        }
        progress.checked(gone: want.subtracting(byID.keys).subtracting(asked), sure: sure, gaps: gaps)
    }

    /// Hands the app a closing the stream did not bring, as if it had (under a seq of its
    /// own); true once it is processed (it is then awaited no more).
    private func recover(_ question: String, _ e: JSONObject) -> Bool {
        var seq: Int64 = 0
        let consumers = hub.withLock { h -> [EventConsumer]? in
            guard progress.awaiting.contains(question), !h.closedHere.contains(question), !h.recovered.contains(question),
                h.asking[question] == nil, !h.askedSinceCheck.contains(question)
            else { return nil }
            h.recovered.insert(question)
            seq = h.nextRecovered
            h.nextRecovered -= 1
            return give(seq, e, &h)
        }
        // Not to be recovered (processed, brought by the stream, or recovered and in hand):
        // sure only once processed, for the stream may drop what it brought before then.
        guard let consumers else { return !progress.awaiting.contains(question) }
        for c in consumers {
            let taken = c.take(seq, e)
            if taken != .given { settled(seq, handed: taken == .unreadable) }
        }
        return false
    }

    /// The event that closed a finished question, as the stream brings it: a `response`, or
    /// a `questionClosed` when it was cancelled or expired; nil while it is pending.
    private static func closing(of q: JSON) -> JSONObject? {
        guard let id = q["id"] else { return nil }
        switch q["status"]?.string {
        case "answered":
            guard let o = q["outcome"], let choice = o["choice"] else { return nil }
            var e: JSONObject = ["type": "response", "question": q, "choice": choice]
            if let guardian = o["guardian"] { e["guardian"] = guardian }
            if let at = o["answeredAt"] { e["answeredAt"] = at }
            return e
        case "cancelled":
            return ["type": "questionClosed", "questionId": id, "reason": "cancelled"]
        case "expired":
            var e: JSONObject = ["type": "questionClosed", "questionId": id, "reason": "expired"]
            if let choice = q["choices"]?.array?.first(where: { $0["id"] == q["defaultChoice"] }) { e["defaultChoice"] = choice }
            return e
        default:
            return nil
        }
    }

    /// Held outcomes are processed when the center closes unless this app (in any run)
    /// asked for outcomes: an app that never does must not hold its stream back for ever.
    private func releaseUnwantedOutcomes() {
        guard !progress.usesOutcomes else { return }
        let outcomes = hub.withLock { h -> [(Int64, String?)] in
            let held = h.held.filter { $0.value["type"]?.string == "questionClosed" }
            for seq in held.keys { h.held[seq] = nil }
            let closed = held.map { ($0.key, Self.closedQuestion(of: $0.value)) }
            for case (_, let q?) in closed where Self.closing(of: q, inHandIn: h) == nil { h.closedHere.remove(q) }
            return closed.sorted { $0.0 < $1.0 }
        }
        for (seq, question) in outcomes { session.done(seq, closing: question) }
    }
}

/// One of the app's open streams of responses or outcomes, as the center sees it.
struct EventConsumer: Sendable {
    enum Taken { case given, unreadable, ended }
    /// Gives it an event.
    let take: @Sendable (Int64, JSONObject) -> Taken
    let finish: @Sendable () -> Void
    /// The task given is done with what its loops took.
    let settle: @Sendable (Int) -> Void
}

/// An open stream of the app's: what hands it an element, and what ends it.
struct Consumer<Element>: Sendable {
    let yield: @Sendable (Element) -> Void
    let finish: @Sendable () -> Void

    init(_ yield: @escaping @Sendable (Element) -> Void, _ finish: @escaping @Sendable () -> Void) {
        self.yield = yield
        self.finish = finish
    }
}

/// A weak reference that can be filled in after the closures capturing it exist.
final class WeakBox<T: AnyObject>: @unchecked Sendable {
    private let lock = Mutex(())
    private weak var _value: T?
    var value: T? {
        get { lock.withLock { _ in _value } }
        set { lock.withLock { _ in _value = newValue } }
    }
}

extension RelayError {
    init(reply r: JSONObject) {
        var details: [String: String] = [:]
        for f in r.fields where !["type", "re", "code", "message"].contains(f.key) {
            details[f.key] = f.value.string ?? f.value.text
        }
        self.init(code: r["code"]?.string ?? "unknown", message: r["message"]?.string ?? "", details: details)
    }
}

extension PermissionResponse {
    init?(event e: JSONObject) {
        guard let q = e["question"].flatMap(PermissionQuestion<Topic>.init(wire:)),
            let choice = e["choice"].flatMap(PermissionChoice.init(wire:))
        else { return nil }
        self.init(
            choice: choice, question: q, guardian: e["guardian"]?.string ?? "",
            answeredAt: e["answeredAt"]?.string.flatMap(Date.init(rfc3339:)) ?? Date())
    }
}

extension QuestionOutcome {
    init?(event e: JSONObject) {
        guard let id = e["questionId"]?.string.flatMap(UUID.init(uuidString:)),
            let reason = e["reason"]?.string.flatMap(Reason.init(rawValue:))
        else { return nil }
        self.init(questionID: id, reason: reason, defaultChoice: e["defaultChoice"].flatMap(PermissionChoice.init(wire:)))
    }
}

extension QuestionSummary {
    init?(wire q: JSON) {
        guard let id = q["id"]?.string.flatMap(UUID.init(uuidString:)) else { return nil }
        self.id = id
        topicKind = q["topic"]?["kind"]?.string ?? ""
        status = q["status"]?.string ?? ""
        attempt = Int(q["attempt"]?.int ?? 1)
        createdAt = q["createdAt"]?.string.flatMap(Date.init(rfc3339:)) ?? Date(timeIntervalSince1970: 0)
        expirationDate = q["expirationDate"]?.string.flatMap(Date.init(rfc3339:))
        handles = (q["topic"]?["personInformation"]?.array ?? []).compactMap { $0["handle"].flatMap(CommunicationHandle.init(wire:)) }
        actions = Set((q["topic"]?["actions"]?.array ?? []).compactMap { $0.string.flatMap(CommunicationTopic.Action.init(rawValue:)) })
        updateDescription = topicKind == SignificantAppUpdateTopic.id ? q["topic"]?["description"]?.string : nil
        choices = (q["choices"]?.array ?? []).compactMap(PermissionChoice.init(wire:))
        defaultChoice = choices.first { $0.id == q["defaultChoice"]?.string }
        choice = q["outcome"]?["choice"].flatMap(PermissionChoice.init(wire:))
        guardian = q["outcome"]?["guardian"]?.string
        answeredAt = q["outcome"]?["answeredAt"]?.string.flatMap(Date.init(rfc3339:))
    }
}
