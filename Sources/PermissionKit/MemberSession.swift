// What AskCenter and GuardianCenter both stand on: the connection (absent without a
// configuration), the record of processed events, and the request plumbing that turns
// relay errors into `RelayError` and an unreachable relay into `AskError.notAvailable`,
// keeping the full reason of the last failure.

import Foundation
import RelayProtocol
import Synchronization

final class MemberSession: Sendable {
    private let connection: RelayConnection?
    /// Why there is no connection: the configuration could not be made.
    private let unconfigured: ClientError?
    private let lastFailure = Mutex<ClientError?>(nil)
    private let onEnd: @Sendable () -> Void
    /// This copy's hold on its default session, let go when the center closes.
    private let claim: SessionClaim?
    let progress: EventProgress
    /// A durable session: its stream is replayed from where the app left it.
    let durable: Bool

    /// `setup` gives the frames to send after every hello; `onWelcome` and `onEvent` run on
    /// the connection's thread, the latter for every event in stream order; `onEnd` runs once
    /// no more events can come (closed, refused, or never configured). Nothing is sent or
    /// received before `start`.
    init(
        configuration: Result<RelayConfiguration, ClientError>, setup: @escaping @Sendable () -> [JSONObject] = { [] },
        onWelcome: @escaping @Sendable (JSONObject) -> Void = { _ in }, onEvent: @escaping @Sendable (JSONObject) -> Void,
        onEnd: @escaping @Sendable () -> Void
    ) {
        var config = try? configuration.get()
        if let c = config, c.sessionPerCopy { (config, claim) = SessionClaim.take(c) } else { claim = nil }
        let progress = EventProgress(path: config?.stateFile)
        self.progress = progress
        durable = config?.session != nil
        self.onEnd = onEnd
        if case .failure(let why) = configuration { unconfigured = why } else { unconfigured = nil }
        connection = config.map {
            RelayConnection(
                config: $0, resumePoint: { progress.mark },
                onWelcome: { [durable = $0.session != nil] w in
                    let head = w["head"]?.int ?? 0
                    if durable {
                        progress.welcome(head: head, cursor: w["cursor"]?.int ?? 0, gap: w["gap"]?.bool == true)
                    } else {
                        progress.restart(at: head)
                    }
                    onWelcome(w)
                },
                setup: setup,
                onEvent: { e in
                    if let seq = e["seq"]?.int { progress.received(seq) }
                    onEvent(e)
                }, onEnd: onEnd)
        }
    }

    deinit { connection?.close() }

    /// Starts the connection; call once the callbacks given to `init` are ready.
    func start() {
        if let connection { connection.start() } else { onEnd() }
    }

    /// Sends a request and returns its `ok` reply. Without a configuration it fails at once
    /// with `AskError.systemError`, which says why.
    func call(_ req: JSONObject) async throws -> JSONObject {
        guard let connection else { throw failed(AskError.systemError(underlyingError: unconfigured ?? .closed), unconfigured) }
        let r: JSONObject
        do {
            r = try await connection.request(req)
        } catch let e as ClientError {
            if case .unauthorized = e { throw failed(AskError.systemError(underlyingError: e), e) }
            throw failed(AskError.notAvailable, e)
        }
        guard r["type"]?.string == "ok" else {
            let e = RelayError(reply: r)
            throw failed(e, .relay(code: e.code, message: e.message))
        }
        return r
    }

    /// Records `why` as the last failure; returns `error` to throw.
    func failed(_ error: any Error, _ why: ClientError?) -> any Error {
        lastFailure.withLock { $0 = why }
        return error
    }

    /// Why the last request failed, in full (`AskError`'s cases carry no reason).
    var lastRequestError: ClientError? { lastFailure.withLock { $0 } }

    /// The questions a list request (`pending`, `history`, `questions`) names, at most
    /// `limit`, or up to the page that holds one `enough` takes: a reply holds what fits in
    /// the relay's budget and says `more`, with the `next` to ask for the rest `after`.
    func list(_ req: JSONObject, limit: Int? = nil, until enough: (JSON) -> Bool = { _ in false }) async throws -> [JSON] {
        var req = req
        var questions: [JSON] = []
        while true {
            if let limit { req["limit"] = .int(Int64(limit - questions.count)) }
            let r = try await call(req)
            let page = r["questions"]?.array ?? []
            questions += page
            // A page always holds one question at least: an empty one would only repeat.
            guard r["more"]?.bool == true, let next = r["next"]?.string, !page.isEmpty, questions.count < limit ?? .max,
                !page.contains(where: enough)
            else {
                return questions
            }
            req["after"] = .string(next)
        }
    }

    /// Sends a frame without waiting for its reply (e.g. a grown subscription).
    func sendLater(_ frame: JSONObject) { connection?.sendLater(frame) }

    /// Records `seq` as processed (the closing of `question`, if given) and acknowledges
    /// what that completes.
    func done(_ seq: Int64, closing question: String? = nil) {
        if let mark = progress.markDone(seq, closing: question) { acknowledge(mark) }
    }

    /// Acknowledges everything up to `mark` (`progress` says it is processed).
    func acknowledge(_ mark: Int64) { connection?.ack(mark) }

    var state: ConnectionState { connection?.state ?? .unavailable }

    var lastError: ClientError? { connection?.lastError ?? unconfigured }

    func states() -> AsyncStream<ConnectionState> {
        connection?.states()
            ?? AsyncStream {
                $0.yield(.unavailable); $0.finish()
            }
    }

    func close() async {
        await connection?.closeAndWait()
        progress.seal()  // before the session is let go to another center
        claim?.release()
    }
}

/// How the member's family reaches its other devices (an extension of the protocol: a
/// relay linked to a family hub; see protocol.md, `familyLink`).
public struct FamilyLink: Sendable, Equatable {
    /// Whether the link to the hub is up now. While it is down, questions asked here and
    /// answers given here wait on this device: a delay is the hub's, not a guardian's.
    public let connected: Bool
    /// False when the hub refused this device (it was removed from the family's devices):
    /// what is asked or answered here waits until it is paired again.
    public let trusted: Bool
    /// The family's messages waiting on this device for the hub.
    public let waiting: Int
    /// When this device last heard from the hub, if ever since it started.
    public let lastContact: Date?

    /// The link, or nil when the family is on this device alone (or the relay is older).
    static func read(_ session: MemberSession) async throws -> FamilyLink? {
        let r: JSONObject
        do {
            r = try await session.call(["type": "familyLink"])
        } catch let e as RelayError where e.code == "unknownType" {
            return nil
        }
        guard r["linked"]?.bool == true else { return nil }
        return FamilyLink(
            connected: r["connected"]?.bool ?? false, trusted: r["trusted"]?.bool ?? true, waiting: Int(r["waiting"]?.int ?? 0),
            lastContact: r["lastContact"]?.string.flatMap(Date.init(rfc3339:)))
    }
}
