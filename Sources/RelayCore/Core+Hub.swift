// A relay linked to a family hub (`CoreConfig.hubDevice`): the family's other devices run
// relays of their own, and the hub (NATS JetStream) carries between them a child's
// questions, each asking once, and the one decision on each asking: a guardian's answer,
// the child's cancel, or its expiry. Decisions are proposed to the hub, where the first
// one on a question's asking wins, and take effect on every relay, this one included,
// as they come back from it in the hub's order. A request that proposes one (an answer,
// a cancel) is answered once the decision is known.
//
// The core only says what to send (`Change.hubOutbound`, stored with the change that
// made it, until the hub has it: `hubSent`) and takes what comes (`hubMessage`); the
// reactor's bridge moves the messages.

import CCrypto
import RelayModel
import RelayProtocol

/// A request waiting for the hub's decision on the question it is about.
struct HubWaiter {
    let conn: ConnectionID
    let id: String
    let proposal: HubProposal
}

/// What a request of this relay proposes.
enum HubProposal: Equatable {
    case answer(guardian: String, choice: String)
    case cancel
}

/// What `hubMessage` did with a message.
public enum HubApplied: Equatable, Sendable {
    case applied
    /// Nothing to do: known already (this relay's own message coming back, a redelivery).
    case known
    /// A decision on an asking this relay has not been told of yet (the hub hands again
    /// later what it handed before and was not acknowledged): kept until the asking comes,
    /// and not to be acknowledged.
    case held
    /// Not for this relay, with why (a member it does not know, a subject it cannot read).
    case ignored(String)
}

extension RelayCore {
    /// Whether `family`'s decisions go through the hub.
    func hubLinked(_ family: String) -> Bool { config.hubDevice != nil && config.hubFamilies?.contains(family) != false }

    /// `familyLink`: whether the member's family reaches its other devices through a hub
    /// here, whether the link is up, and how many of the family's messages wait for it: a
    /// client tells its user why a question or an answer is not through yet.
    func familyLink(_ r: Request) -> ReplyFields {
        let family = r.member.record.family
        guard hubLinked(family) else { return ["linked": false] }
        var reply = linkState
        reply["linked"] = true
        reply["waiting"] = .int(Int64(hubOutbox.values.reduce(0) { $0 + ($1.family == family ? 1 : 0) }))
        return .object(reply)
    }

    /// The link as `status` and `familyLink` tell it.
    var linkState: JSONObject {
        [
            "connected": .bool(hubLink.connected), "trusted": .bool(!hubRefused),
            "lastContact": hubLink.lastContact.map { .string($0.rfc3339) } ?? .null,
        ]
    }

    /// Keeps a message for the hub with this turn's changes.
    func queueForHub(family: String, subject: String, messageID: String, body: JSONObject, firstOnSubject: Bool) {
        lastHubOutbound += 1
        let m = HubOutbound(
            id: lastHubOutbound, family: family, subject: subject, messageID: messageID, body: body.encoded,
            firstOnSubject: firstOnSubject)
        hubOutbox[m.id] = m
        persist(.hubOutbound(m))
    }

    /// The hub has stored (or, for a decision that came second, refused for good) the
    /// outbox's message `id`. An asking stays until it comes back from the hub (or gives way
    /// to another device's): until then, where it stands among the hub's is not known.
    public func hubSent(_ id: Int64) {
        guard let m = hubOutbox[id] else { return }
        if case .ask? = HubNames.parse(m.subject)?.subject { return }
        hubOutbox[id] = nil
        persist(.hubSent(id: id))
    }

    /// Drops this relay's asking `key` from the outbox: back from the hub, or given way.
    private func settleOwnAsking(_ key: String) {
        guard let row = hubAskingsOnTheirWay.removeValue(forKey: key) else { return }
        hubOutbox[row] = nil
        persist(.hubSent(id: row))
    }

    /// A question asked (or asked again) here, for the family's other devices.
    func tellHubAsked(_ q: QuestionRecord) {
        guard let device = config.hubDevice, hubLinked(q.family) else { return }
        let body: JSONObject = [
            "child": .string(q.child), "attempt": .int(q.attempt), "createdAt": .int(q.createdAt.milliseconds),
            "question": (try? JSON.parse(q.content.encoded)) ?? .null, "device": .string(device),
        ]
        queueForHub(
            family: q.family, subject: HubNames.ask(family: q.family, question: q.id), messageID: Self.hubKey(q),
            body: body, firstOnSubject: false)
        hubAskingsOnTheirWay[Self.hubKey(q)] = lastHubOutbound
    }

    /// Requests of one connection that may wait for the hub's decisions at once: while the
    /// hub is out of reach, a client repeating an answer would otherwise have the relay keep
    /// each request (and its id) until it comes back.
    static let hubWaitingPerConnection = 64

    /// Proposes a decision on `q`'s asking for the request `r`, which is answered once the
    /// hub's decision comes back.
    func propose(_ proposal: HubProposal, on q: QuestionRecord, _ r: Request) throws(RequestError) -> ReplyFields {
        guard let c = connections[r.conn] else { return .later }
        guard c.hubWaiting < Self.hubWaitingPerConnection else {
            throw RequestError(
                .busy,
                "\(Self.hubWaitingPerConnection) requests of this connection already wait for the family's other devices"
                    + " to agree: wait for their replies, then send it again")
        }
        c.hubWaiting += 1
        let key = Self.hubKey(q)
        hubWaiters[key, default: []].append(HubWaiter(conn: r.conn, id: r.id, proposal: proposal))
        switch proposal {
        case .answer(let guardian, let choice): proposeAnswer(q, guardian: guardian, choice: choice, now: r.now)
        case .cancel:
            proposeDecision(q, kind: "cancel", id: "cancel", ["member": .string(q.child)], now: r.now)
        }
        return .later
    }

    /// The content the guardian answered goes with the answer: where two devices asked one id
    /// at once, it may not be the one that stands.
    private func proposeAnswer(_ q: QuestionRecord, guardian: String, choice: String, now: Timestamp) {
        proposeDecision(
            q, kind: "answer", id: "answer:\(guardian):\(choice)",
            ["member": .string(guardian), "choice": .string(choice), "content": .string(Self.digest(q.content))], now: now)
    }

    /// A question's content in short (SHA-256, hex), the same on every relay: of its form
    /// as the hub carries it (parsed and written again), whether asked here or there.
    static func digest(_ content: QuestionContent) -> String {
        var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
        let bytes = (try? JSON.parse(content.encoded))?.encoded ?? content.encoded
        _ = bytes.withUnsafeBufferPointer { SHA256($0.baseAddress, $0.count, &digest) }
        return digest.map { String(format: "%02x", $0) }.joined()
    }

    /// Proposes that `q`'s asking expired (its deadline passed by this relay's clock).
    func proposeExpiry(_ q: QuestionRecord, now: Timestamp) {
        proposeDecision(q, kind: "expire", id: "expire", [:], now: now)
    }

    /// `fields` are made only for a decision not proposed yet: an answer's hold the digest of
    /// its question's content (up to a megabyte, parsed and written again), and a client may
    /// repeat its answer.
    private func proposeDecision(
        _ q: QuestionRecord, kind: String, id: String, _ fields: @autoclosure () -> JSONObject, now: Timestamp
    ) {
        let messageID = "\(Self.hubKey(q)):\(id)"
        guard hubProposed[Self.hubKey(q), default: []].insert(messageID).inserted else { return }  // proposed already in this run
        var body: JSONObject = ["kind": .string(kind), "at": .int(now.milliseconds), "device": .string(config.hubDevice ?? "")]
        for f in fields().fields { body[f.key] = f.value }
        queueForHub(
            family: q.family, subject: HubNames.decision(family: q.family, question: q.id, asking: Self.asking(q)),
            messageID: messageID, body: body, firstOnSubject: true)
    }

    static func asking(_ q: QuestionRecord) -> String { HubNames.asking(attempt: q.attempt, createdAt: q.createdAt) }

    static func hubKey(_ q: QuestionRecord) -> String { hubKey(q.id, asking(q)) }

    /// A question's asking, as the hub's message ids and this relay's bookkeeping name it.
    static func hubKey(_ id: String, _ asking: String) -> String { "\(id)#\(asking)" }

    /// A message of the family's stream on the hub (this relay's own ones too, as they
    /// come back): a question asked on a device, or the decision on an asking. `deliveries`:
    /// how many times the hub has handed it (1 the first time).
    public func hubMessage(
        subject: String, body bytes: [UInt8], deliveries: UInt64 = 1, sequence: UInt64 = 0, now: Timestamp
    ) -> HubApplied {
        guard let body = (try? JSON.parse(bytes))?.object else { return .ignored("\(subject): the body is not a JSON object") }
        defer { flushDeferred() }
        let parsed = HubNames.parse(subject)
        if let family = parsed?.family, !hubLinked(family) { return .ignored("\(subject): family \(family) is not linked to the hub here") }
        switch parsed {
        case (let family, .ask(let question))?: return hubAsked(question, in: family, body, sequence: sequence, now: now)
        case (let family, .decision(let question, let asking))?:
            return hubDecided(question, in: family, asking: asking, body, deliveries: deliveries, now: now)
        case nil: return .ignored("\(subject) is not a subject this relay reads")
        }
    }

    /// `sequence`: where the asking is on the family's stream (0: not known).
    private func hubAsked(_ id: String, in family: String, _ body: JSONObject, sequence: UInt64, now: Timestamp) -> HubApplied {
        guard let childID = body["child"]?.string, let attempt = body["attempt"]?.int, let createdAt = body["createdAt"]?.int,
            let question = body["question"], let content = QuestionContent(encoded: question.encoded), content.id == id
        else { return .ignored("question \(id): the message lacks its child, attempt, time or question") }
        let asked = Timestamp(milliseconds: createdAt)
        let key = Self.hubKey(id, HubNames.asking(attempt: attempt, createdAt: asked))
        if body["device"]?.string == config.hubDevice { settleOwnAsking(key) }  // one of ours, back (whatever becomes of it)
        if hubLeftBehind.contains(key) { return .known }  // handed again: left behind for good
        // Only within the family whose stream it came on: nothing crosses families.
        guard let child = members[childID], child.record.role == .child, !child.isRemoved, child.family.id == family else {
            return .ignored("question \(id): \(childID) is not a child of \(family) on this relay")
        }
        let previous: QuestionRecord?
        do { previous = try self.question(content.key) } catch { return .held }  // unreadable now: handed again
        if let previous {
            guard previous.child == childID else { return .ignored("question \(id) is another child's here") }
            if previous.status == .pending && attempt == previous.attempt {
                // Two askings of one attempt (two devices asking one id at once): the first the
                // hub had stands, so this relay's own, not back yet, gives way, as does one
                // that came from the hub but was stored there after this one.
                let standing = Self.hubKey(previous)
                let storedBefore = key != standing && sequence > 0 && hubStandingAt[standing].map { sequence < $0 } ?? false
                guard hubAskingsOnTheirWay[standing] != nil || storedBefore else {
                    if key != standing {
                        hubLeftBehind.insert(key)
                        hubEarly[key] = nil  // a decision held for it is left behind with it
                    } else {
                        if sequence > 0 { hubStandingAt[key] = sequence }  // ours, back: where it stands
                        if let early = hubEarly.removeValue(forKey: key) {
                            _ = hubDecided(id, in: family, asking: Self.asking(previous), early, now: now)  // held meanwhile
                        }
                    }
                    return .known
                }
                settleOwnAsking(standing)
                if storedBefore { hubLeftBehind.insert(standing) }
            } else if (asked, attempt) <= (previous.createdAt, previous.attempt) {
                return .known  // the same asking again, or an older one (an id forgotten on a device starts again at 1)
            }
            if previous.status == .pending { child.pendingEnded(previous) }  // left behind by the other asking
        }
        let record = QuestionRecord(
            content: content, child: childID, family: child.family.id, status: .pending, attempt: attempt, createdAt: asked,
            row: previous?.row ?? questions.newRow())
        // The same question asked on two devices at once: the guardians here have it already.
        let same = previous.map { $0.status == .pending && $0.attempt == attempt && $0.content == content } ?? false
        fileAsked(record, previous: previous, child: child, now: now, announce: !same)
        if let previous {
            hubStandingAt[Self.hubKey(previous)] = nil
            redirectProposals(from: previous, to: record, same: same, now: now)
        }
        if sequence > 0 { hubStandingAt[Self.hubKey(record)] = sequence }
        // A decision that came before it (the hub hands a message again only later).
        if let early = hubEarly.removeValue(forKey: Self.hubKey(record)) {
            _ = hubDecided(id, in: record.family, asking: Self.asking(record), early, now: now)
        }
        return .applied
    }

    private func hubDecided(
        _ id: String, in family: String, asking: String, _ body: JSONObject, deliveries: UInt64 = 1, now: Timestamp
    ) -> HubApplied {
        guard let key = QuestionID(id) else { return .ignored("\(id) is not a question id") }
        guard let entry = questions.entry(key), entry.record.family == family, Self.asking(entry.record) == asking else {
            let stored: QuestionRecord?
            do { stored = try question(key) } catch { return .held }  // unreadable now: handed again
            // Left behind (an older asking, or one of the same attempt after the one that stood):
            let behind = stored.map { hubLeftBehind.contains(Self.hubKey(id, asking)) || !mayCome(asking, after: $0) } ?? false
            if let q = stored, q.family == family, behind {
                // Decided and let go since (a removed child's question): requests that wait on it get their reply.
                if Self.asking(q) == asking && q.status != .pending { answerWaiters(on: q) }
                return .known
            }
            return holdForItsAsking(Self.hubKey(id, asking), body, deliveries: deliveries)  // not come yet
        }
        // This relay's own asking, not back yet: another device's of its attempt may still stand.
        if entry.record.status == .pending && hubAskingsOnTheirWay[Self.hubKey(entry.record)] != nil {
            return holdForItsAsking(Self.hubKey(id, asking), body, deliveries: deliveries)
        }
        var applied = HubApplied.known
        if entry.record.status == .pending {
            // As decided, by the deciding device's clock, though never before the asking nor after now.
            let at = min(now, max(entry.record.createdAt, body["at"]?.int.map(Timestamp.init(milliseconds:)) ?? now))
            // The first decision on the asking, whatever it is: one not to apply as it says (an
            // answer to another version of the asking, where two devices asked one id at once
            // and the hub kept the other; one that names no guardian or choice of it; a kind
            // this relay does not know) closes the question unanswered, on every relay alike:
            // nothing is approved that was not shown, and the question does not wait for good.
            switch body["kind"]?.string {
            case "answer":
                if let guardian = body["member"]?.string,
                    body["content"]?.string.map({ $0 == Self.digest(entry.record.content) }) ?? true,
                    let choice = body["choice"]?.string.flatMap(entry.record.content.choice)
                {
                    applyAnswer(entry, guardian: guardian, choice: choice, now: at)
                } else {
                    close(question: entry.record, reason: .cancelled, now: at)
                }
            case "expire": close(question: entry.record, reason: .expired, now: at)
            default: close(question: entry.record, reason: .cancelled, now: at)  // a cancel, or a kind unknown here
            }
            applied = .applied
        }
        if entry.record.status != .pending { answerWaiters(on: entry.record) }
        return applied
    }

    /// The hub hands a message again every few seconds until it is acknowledged: two minutes.
    static let hubHoldLimit: UInt64 = 24

    /// Keeps a decision for its asking, which is to come (in this run; unacknowledged, the hub
    /// hands it again). One handed `hubHoldLimit` times waits for an asking that will not
    /// come (left behind before a restart, or not for this relay): it goes, said.
    private func holdForItsAsking(_ key: String, _ body: JSONObject, deliveries: UInt64) -> HubApplied {
        guard deliveries < Self.hubHoldLimit else {
            hubEarly[key] = nil
            return .ignored("\(key): a decision handed \(deliveries) times whose asking never came (left behind, or not for this relay)")
        }
        hubEarly[key] = body
        return .held
    }

    /// This relay's proposals on an asking that gave way to another device's of the same
    /// attempt, also those of requests gone since: proposed again on the one that stands (a
    /// cancel always; an answer when it asks the same, else its request gets `conflict`:
    /// the guardian answered a question that is not the one that stands).
    private func redirectProposals(from old: QuestionRecord, to new: QuestionRecord, same: Bool, now: Timestamp) {
        let oldKey = Self.hubKey(old)
        for messageID in (hubProposed.removeValue(forKey: oldKey) ?? []).sorted() {
            let parts = messageID.dropFirst(oldKey.count + 1).split(separator: ":", maxSplits: 2).map(String.init)
            if parts == ["cancel"] {
                proposeDecision(new, kind: "cancel", id: "cancel", ["member": .string(new.child)], now: now)
            } else if same, parts.count == 3, parts[0] == "answer" {
                proposeAnswer(new, guardian: parts[1], choice: parts[2], now: now)
            }
        }
        for w in hubWaiters.removeValue(forKey: oldKey) ?? [] where connections[w.conn] != nil {
            if same || w.proposal == .cancel {
                hubWaiters[Self.hubKey(new), default: []].append(w)
            } else {
                let why = "question \(new.id) was asked on another device at the same moment, and that version stands: look at it again"
                replyWaiting(w, .failure(RequestError(.conflict, why)))
            }
        }
    }

    /// Replies to the requests that proposed a decision on `q`'s asking, now decided.
    private func answerWaiters(on q: QuestionRecord) {
        hubProposed[Self.hubKey(q)] = nil
        for w in hubWaiters.removeValue(forKey: Self.hubKey(q)) ?? [] where connections[w.conn] != nil {
            replyWaiting(w, Result { () throws(RequestError) in try decided(q, for: w.proposal) })
        }
    }

    private func replyWaiting(_ w: HubWaiter, _ result: Result<ReplyFields, RequestError>) {
        connections[w.conn]?.hubWaiting -= 1
        reply(w.conn, w.id, result)
    }

    /// A question no longer pending (decided, or closed here with its removed child): no
    /// other asking stands in its place any more.
    func letGoOfStreamPosition(_ q: QuestionRecord) {
        if !hubStandingAt.isEmpty { hubStandingAt[Self.hubKey(q)] = nil }
    }

    /// Whether `asking` (of a decision) may still come to stand in place of `q`'s current
    /// asking: while `q` is pending, another asking of its attempt only if `q`'s is this
    /// relay's own and not back from the hub, or came from the hub in this run (one stored
    /// before it may still be handed); else a later one (as `hubAsked` takes them).
    private func mayCome(_ asking: String, after q: QuestionRecord) -> Bool {
        let parts = asking.split(separator: "-")
        guard parts.count == 2, let attempt = Int64(parts[0]), let created = Int64(parts[1]) else { return false }
        if q.status == .pending && attempt == q.attempt {
            // Or one that stands as the first handed here, where another stored before it may still come.
            return hubAskingsOnTheirWay[Self.hubKey(q)] != nil || hubStandingAt[Self.hubKey(q)] != nil
        }
        return (created, attempt) > (q.createdAt.milliseconds, q.attempt)
    }

    /// Forgets the requests of a connection that went away (they were proposals: the
    /// decisions still come, for everyone).
    func forgetHubWaiters(of conn: ConnectionID) {
        for key in Array(hubWaiters.keys) {
            hubWaiters[key]?.removeAll { $0.conn == conn }
            if hubWaiters[key]?.isEmpty == true { hubWaiters[key] = nil }
        }
    }

    /// The reply to a request that proposed `proposal`, now that `q`'s asking is decided.
    private func decided(_ q: QuestionRecord, for proposal: HubProposal) throws(RequestError) -> ReplyFields {
        switch (q.status, proposal) {
        case (.answered, .answer(let guardian, let choice)):
            guard let o = q.outcome, o.guardian == guardian, o.choice.has(id: choice) else { throw alreadyAnswered(q) }
            return ["questionId": .string(q.id), "status": "answered"]
        case (.answered, .cancel): throw alreadyAnswered(q)
        case (.cancelled, .cancel): return ["questionId": .string(q.id), "status": "cancelled"]
        case (.cancelled, _): throw RequestError(.cancelled, "question \(q.id) was cancelled")
        case (.expired, _): throw RequestError(.expired, "question \(q.id) expired before it was answered")
        case (.pending, _): throw RequestError(.internal, "question \(q.id) is still pending")
        }
    }
}
