// Child requests (§7): subscribe, ask, cancel, questions, limits, knownHandles.

import RelayProtocol
import RelayModel

extension RelayCore {
    func subscribe(_ r: Request) throws(RequestError) -> ReplyFields {
        guard let list = r.frame["topics"]?.array else {
            throw RequestError(.badRequest, "\"topics\" must be an array of topic kinds")
        }
        var topics: Set<TopicKind> = []
        for t in list {
            guard let name = t.string, let kind = TopicKind(rawValue: name) else {
                throw RequestError(.badRequest, "unknown topic \(t.text): use communication or significantAppUpdate")
            }
            topics.insert(kind)
        }
        connections[r.conn]?.session?.topics = topics
        if let durable = r.session.durable {
            durable.record.topics = topics
            persist(.session(durable.record))
        }
        return ["topics": .array(TopicKind.allCases.filter(topics.contains).map { .string($0.rawValue) })]
    }

    func ask(_ r: Request) throws(RequestError) -> ReplyFields {
        guard let q = r.frame["question"]?.object else {
            throw RequestError(.badRequest, "\"question\" must be an object")
        }
        // A resend is answered before its question is validated again (§12).
        let previous = try q["id"]?.string.flatMap(QuestionID.init).flatMap { id throws(RequestError) in try question(id) }
        if let resent = resent(previous, by: r.member, now: r.now, closedToo: r.frame["resend"]?.bool == true) { return resent }
        return try file(QuestionContent.validate(q, now: r.now), previous: previous, r)
    }

    /// An ask whose question was read straight from the frame's bytes (`QuestionContent.readAsk`).
    func ask(_ content: QuestionContent, _ r: Request) throws(RequestError) -> ReplyFields {
        let previous = try question(content.key)
        if let resent = resent(previous, by: r.member, now: r.now) { return resent }
        return try file(content, previous: previous, r)
    }

    /// The reply to a resend of a child's pending or answered question: the same as the
    /// first time (§12). Nil for anything else, but for a client's own resend of an ask
    /// whose reply it never had (`"resend": true`, protocol.md), which must not open again
    /// a question cancelled or expired meanwhile (`closedToo`): its status then.
    private func resent(_ previous: QuestionRecord?, by child: Member, now: Timestamp, closedToo: Bool = false) -> ReplyFields? {
        guard let existing = previous, existing.child == child.id else { return nil }
        switch existing.status {
        case .pending:
            let ok: ReplyFields = ["questionId": .string(existing.id), "status": "pending", "attempt": .int(existing.attempt)]
            return allKnown(existing.content, child: child, now: now) ? ok.adding(["allKnown": true]) : ok
        case .answered:
            return [
                "questionId": .string(existing.id), "status": "answered", "attempt": .int(existing.attempt),
                "response": (try? JSON.parse(responseObject(existing))) ?? .null,
            ]
        case .cancelled, .expired:
            guard closedToo else { return nil }
            return ["questionId": .string(existing.id), "status": .string(existing.status.rawValue), "attempt": .int(existing.attempt)]
        }
    }

    /// Files a valid question (new, or asked again after it was cancelled or expired) and
    /// sends it to the guardians.
    private func file(_ content: QuestionContent, previous: QuestionRecord?, _ r: Request) throws(RequestError)
        -> ReplyFields
    {
        let child = r.member
        if let previous, previous.child != child.id {
            throw RequestError(.invalidQuestion, "question id \(content.id) is already used by another question")
        }
        let guardians = child.family.guardians
        guard !guardians.isEmpty else {
            throw RequestError(
                .contactSyncNotSetup,
                "the family \(child.family.id) has no guardian to ask; its relay's admin adds one with"
                    + " `permission-relay member add \(child.family.id) NAME --role guardian`")
        }
        if content.kind == .communication && !child.record.limitsEnabled {
            throw RequestError(
                .communicationLimitsNotEnabled,
                "communication limits are off for \(child.id): the app may allow the contact without asking")
        }
        let pendingNow = child.pendingQuestions
        if config.maxPendingPerChild > 0 && pendingNow >= config.maxPendingPerChild {
            throw RequestError(
                .tooManyPending,
                "\(child.id) already has \(pendingNow) pending questions (the limit is \(config.maxPendingPerChild)); cancel some or wait for answers"
            )
        }
        let bytesLimit = config.maxPendingBytesPerChild
        if bytesLimit > 0 && child.pendingBytes + content.encoded.count > bytesLimit {
            throw RequestError(
                .tooManyPending,
                "\(child.id)'s pending questions take \(child.pendingBytes) bytes, and this one \(content.encoded.count) more (the"
                    + " limit is \(bytesLimit)); cancel some or wait for answers")
        }
        if config.askRateLimit > 0 {
            let capacity = max(2 * config.askRateLimit, 1)
            var bucket = child.askBucket ?? TokenBucket(tokens: capacity, last: r.now)
            let allowed = bucket.take(rate: config.askRateLimit, capacity: capacity, now: r.now)
            child.askBucket = bucket
            guard allowed else {
                // As JSON writes numbers: `32`, not `32.0`.
                let rate = JSON.double(config.askRateLimit).text, burst = JSON.double(capacity).text
                throw RequestError(.rateLimited, "too many asks: at most \(rate) per second, in bursts of \(burst); try again shortly")
            }
        }

        let record = QuestionRecord(
            content: content, child: child.id, family: child.family.id, status: .pending,
            attempt: (previous?.attempt ?? 0) + 1, createdAt: previous?.createdAt ?? r.now, row: previous?.row ?? questions.newRow())
        fileAsked(record, previous: previous, child: child, now: r.now)
        tellHubAsked(record)
        let allKnown = allKnown(content, child: child, now: r.now)
        return .frame(
            okFrame(re: r.id, capacity: 160) { ok in
                ok.appendJSONField("questionId", record.key)
                ok.append(literal: #","status":"pending""#)
                ok.appendJSONField("attempt", record.attempt)
                if allKnown {
                    ok.appendJSONKey("allKnown")
                    ok.append(literal: "true")
                }
            })
    }

    /// Whether every handle a communication question names is known to the child (`ok`'s
    /// `allKnown`: the guardian may still be asked to confirm).
    private func allKnown(_ content: QuestionContent, child: Member, now: Timestamp) -> Bool {
        content.kind == .communication && content.handles.allSatisfy { child.isKnown($0, at: now) }
    }

    /// Holds a question asked (by the child here, or on another device) and tells the guardians.
    func fileAsked(_ record: QuestionRecord, previous: QuestionRecord?, child: Member, now: Timestamp, announce: Bool = true) {
        if questions.entry(record.key) == nil {
            questions.insert(record)
            child.held.insert(record.key)
        } else {
            questions.save(record)
        }
        child.pendingAdded(record)
        if let e = record.content.expiration { addDeadline(e, of: record.key) }
        if announce {
            appendEvent(to: child.family.guardians, topic: nil, type: "question", capacity: record.content.encoded.count + 240, now: now) {
                out in
                out.appendJSONKey("question")
                appendQuestion(record, to: &out)
            }
        }
        persist(.question(record))
    }

    func cancel(_ r: Request) throws(RequestError) -> ReplyFields {
        let raw = try r.string("questionId")
        guard let key = QuestionID(raw), var q = try question(key), q.child == r.member.id else {
            throw RequestError(.notFound, "no question \(raw) of yours")
        }
        let id = q.id
        switch q.status {
        case .cancelled:
            return ["questionId": .string(id), "status": "cancelled"]
        case .expired:
            throw RequestError(.expired, "question \(id) has already expired")
        case .answered:
            throw alreadyAnswered(q)
        case .pending:
            if hubLinked(q.family) { return try propose(.cancel, on: q, r) }
            q.status = .cancelled
            close(question: q, reason: .cancelled, now: r.now)
            return ["questionId": .string(id), "status": "cancelled"]
        }
    }

    func listQuestions(_ r: Request) throws(RequestError) -> ReplyFields {
        let filter: QuestionStatus?
        switch try r.optionalString("status") {
        case nil: filter = nil
        case let s?:
            guard let st = QuestionStatus(rawValue: s) else {
                throw RequestError(.badRequest, "unknown status \"\(s)\": use pending, answered, cancelled or expired")
            }
            filter = st
        }
        return try page(of: [r.member], status: filter, newestFirst: true, limit: Self.questionsPerReply, r)
    }

    func limits(_ r: Request) throws(RequestError) -> ReplyFields {
        ["enabled": .bool(r.member.record.limitsEnabled)]
    }

    func knownHandles(_ r: Request) throws(RequestError) -> ReplyFields {
        let asked = try r.handles("handles")
        var known: [JSON] = []
        var timed: [JSON] = []  // those known only for a while, and until when (protocol.md)
        for h in asked {
            guard let k = r.member.known[h], k.isKnown(at: r.now) else { continue }
            known.append(h.json)
            if !k.permanent, let until = k.until {
                timed.append(.object(["value": .string(h.value), "kind": .string(h.kind.rawValue), "until": .string(until.rfc3339)]))
            }
        }
        var reply: JSONObject = ["known": .array(known)]
        if !timed.isEmpty { reply["timed"] = .array(timed) }
        return .object(reply)
    }

    // MARK: - Shared by several requests

    /// The question as a value, for replies that list or embed questions: one rendering
    /// serves events and replies alike.
    func questionJSON(_ q: QuestionRecord) -> JSON {
        var out: [UInt8] = []
        appendQuestion(q, to: &out)
        return (try? JSON.parse(out)) ?? .null
    }

    /// The question as sent on — its content plus child, createdAt, status, attempt and
    /// outcome — spliced onto the content's encoded bytes instead of re-encoding them.
    /// `outcomeFields`, when given, are the outcome's fields already encoded.
    func appendQuestion(_ q: QuestionRecord, to out: inout [UInt8], outcomeFields: [UInt8]? = nil) {
        out.append(bytes: q.content.encoded.dropLast())  // all but the closing brace
        out.appendJSONField("child", q.child)
        out.appendJSONField("createdAt", q.createdAt)
        out.appendJSONField("status", name: q.status.name)
        out.appendJSONField("attempt", q.attempt)
        if let o = q.outcome {
            out.appendJSONKey("outcome")
            out.append(UInt8(ascii: "{"))
            if let outcomeFields { out.append(bytes: outcomeFields) } else { appendOutcomeFields(o, to: &out) }
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "}"))
    }

    /// `"choice":…,"guardian":…,"answeredAt":…`: an outcome, and the tail of a `response`.
    func appendOutcomeFields(_ o: Outcome, to out: inout [UInt8]) {
        out.appendJSONKey("choice")
        o.choice.encode(into: &out)
        out.appendJSONField("guardian", o.guardian)
        out.appendJSONField("answeredAt", o.answeredAt)
    }

    /// Appends the fields of a `response` event (after its `seq`, or after an object's
    /// `{`). The outcome's fields appear twice (in the question and after it) and are
    /// encoded once.
    func appendResponseFields(_ q: QuestionRecord, to out: inout [UInt8]) {
        guard let o = q.outcome else { return }
        var outcome: [UInt8] = []
        outcome.reserveCapacity(160)
        appendOutcomeFields(o, to: &outcome)
        out.appendJSONKey("question")
        appendQuestion(q, to: &out, outcomeFields: outcome)
        out.append(UInt8(ascii: ","))
        out.append(bytes: outcome)
    }

    /// A `response` event's fields as an object.
    private func responseObject(_ q: QuestionRecord) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "{")]
        appendResponseFields(q, to: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }

    func alreadyAnswered(_ q: QuestionRecord) -> RequestError {
        var extra: JSONObject = [:]
        var message = "question \(q.id) was already answered"
        if let o = q.outcome {
            extra["answeredBy"] = .string(o.guardian)
            extra["choice"] = o.choice.json
            message += " by \(o.guardian): \(o.choice.title) (\(o.choice.answer.rawValue))"
        }
        return RequestError(.alreadyAnswered, message, extra: extra)
    }

    /// Ends a pending question as cancelled or expired: stores it and tells the child and the guardians.
    func close(question q: QuestionRecord, reason: QuestionStatus, now: Timestamp) {
        letGoOfStreamPosition(q)
        var q = q
        q.status = reason
        questions.save(q)
        let child = members[q.child]
        child?.pendingEnded(q)
        persist(.questionState(q))
        var toChild: JSONObject = ["questionId": .string(q.id), "reason": .string(reason.rawValue)]
        if reason == .expired, let d = q.content.choice(q.content.defaultChoice) { toChild["defaultChoice"] = d.json }
        if let child, !child.isRemoved {
            appendEvent(to: child, topic: q.content.kind, type: "questionClosed", toChild, now: now)
        }
        tellGuardiansClosed(q, in: child?.family ?? families[q.family], now: now)
    }

    /// Appends `questionClosed` to every guardian's stream of the question's family, for
    /// the question's status now; an answered one says by whom, and (an extension, see
    /// protocol.md) with which choice, so that the other guardians learn what was decided.
    func tellGuardiansClosed(_ q: QuestionRecord, in family: Family?, now: Timestamp) {
        appendEvent(to: family?.guardians ?? [], topic: nil, type: "questionClosed", capacity: 256, now: now) { out in
            out.appendJSONField("questionId", q.key)
            out.appendJSONField("child", q.child)
            out.appendJSONField("reason", name: q.status.name)
            if q.status == .answered, let o = q.outcome {
                out.appendJSONField("by", o.guardian)
                out.appendJSONKey("choice")
                o.choice.encode(into: &out)
            }
        }
    }
}
