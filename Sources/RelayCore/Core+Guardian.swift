// Guardian requests (§7): answer, pending, setLimits (also admin), addKnownHandles,
// removeKnownHandles, history. Nothing crosses families: another family's question
// or child is answered as if it did not exist.

import RelayProtocol
import RelayModel

extension RelayCore {
    func answer(_ r: Request) throws(RequestError) -> ReplyFields {
        let raw = try r.string("questionId")
        let choice = try r.string("choice")
        guard let key = QuestionID(raw) else { throw RequestError(.notFound, "no question \(raw) in your family") }
        return try answer(key, choice: choice, r)
    }

    func answer(_ key: QuestionID, choice choiceID: String, _ r: Request) throws(RequestError) -> ReplyFields {
        let family = r.member.family
        guard let q = try question(key), q.family == family.id else {
            throw RequestError(.notFound, "no question \(key) in your family")
        }
        switch q.status {
        case .answered:
            if let o = q.outcome, o.guardian == r.member.id, o.choice.has(id: choiceID) {
                return ["questionId": .string(key.description), "status": "answered"]
            }
            throw alreadyAnswered(q)
        case .expired: throw RequestError(.expired, "question \(key) expired before it was answered")
        case .cancelled: throw RequestError(.cancelled, "question \(key) was cancelled")
        case .pending: break
        }
        // A pending question is always held.
        guard let entry = questions.entry(key) else { throw RequestError(.internal, "question \(key) is pending but not held") }
        let content = entry.record.content
        guard let choice = content.choice(choiceID) else {
            throw RequestError(
                .invalidChoice,
                "\"\(choiceID)\" is not a choice of question \(key); its choices are \(content.choices.map(\.id).joined(separator: ", "))")
        }
        if hubLinked(entry.record.family) { return try propose(.answer(guardian: r.member.id, choice: choiceID), on: entry.record, r) }
        applyAnswer(entry, guardian: r.member.id, choice: choice, now: r.now)
        return .frame(
            okFrame(re: r.id, capacity: 128) { ok in
                ok.appendJSONField("questionId", key)
                ok.append(literal: #","status":"answered""#)
            })
    }

    /// Answers a pending question: stores it, and tells the child and the guardians.
    func applyAnswer(_ entry: QuestionTable.Entry, guardian: String, choice: Choice, now: Timestamp) {
        // Changed in place: a copy taken out and stored back retained and released every field twice.
        entry.record.status = .answered
        entry.record.outcome = Outcome(choice: choice, guardian: guardian, answeredAt: now)
        let q = entry.record
        let child = members[q.child]
        child?.pendingEnded(q)
        letGoOfStreamPosition(q)
        persist(.questionState(q))
        if let child, !child.isRemoved {
            appendEvent(to: child, topic: q.content.kind, type: "response", capacity: q.content.encoded.count + 400, now: now) {
                appendResponseFields(q, to: &$0)
            }
        }
        tellGuardiansClosed(q, in: child?.family ?? families[q.family], now: now)
        if let child, choice.answer == .approval && q.content.kind == .communication {
            // However long the approval (the contract bounds it only below), it ends by the
            // last instant a timestamp can be written at.
            let until = choice.durationSeconds.map { min(now.adding(seconds: $0), Timestamp.latest) }
            learn(q.content.handles, child: child, until: until, actions: q.content.actions, now: now)
        }
    }

    func pending(_ r: Request) throws(RequestError) -> ReplyFields {
        let children = try childrenInScope(r)
        return try page(of: children, status: .pending, newestFirst: false, r)
    }

    func history(_ r: Request) throws(RequestError) -> ReplyFields {
        let children = try childrenInScope(r, includeRemoved: true)
        var limit = 100
        switch r.frame["limit"] {
        case nil, .null?: break
        case let v?:
            guard let n = v.wholeNumber, n > 0 else { throw RequestError(.badRequest, "\"limit\" must be a positive integer") }
            limit = Int(min(n, 10_000))
        }
        return try page(of: children, status: nil, newestFirst: true, limit: limit, r)
    }

    func setLimits(_ r: Request) throws(RequestError) -> ReplyFields {
        let id = try r.string("child")
        let enabled = try r.bool("enabled")
        guard let child = members[id], !child.isRemoved, child.record.role == .child,
            r.session.role == .admin || child.family === r.session.family
        else { throw RequestError(.notFound, "no child \(id)\(r.session.role == .admin ? "" : " in your family")") }
        if child.record.limitsEnabled != enabled {
            child.record.limitsEnabled = enabled
            persist(.member(child.record))
            note(r, "turned \(id)'s communication limits \(enabled ? "on" : "off")")
            appendEvent(to: child, topic: nil, type: "limitsChanged", ["enabled": .bool(enabled)], now: r.now)
        }
        return ["child": .string(id), "enabled": .bool(enabled)]
    }

    func changeKnownHandles(_ r: Request, add: Bool) throws(RequestError) -> ReplyFields {
        let id = try r.string("child")
        guard let child = members[id], !child.isRemoved, child.record.role == .child, child.family === r.member.family else {
            throw RequestError(.notFound, "no child \(id) in your family")
        }
        let handles = try r.handles("handles")
        if add {
            if let long = handles.first(where: { $0.value.utf8.count > NormalizedHandle.maxValueBytes }) {
                throw RequestError(
                    .badRequest,
                    "a handle's value is \(NormalizedHandle.maxValueBytes) bytes at most; one of these is \(long.value.utf8.count)")
            }
            let limit = config.maxKnownHandlesPerChild
            if limit > 0 {
                let new = Set(handles).count { child.known[$0] == nil }
                guard child.known.count + new <= limit else {
                    throw RequestError(
                        .badRequest,
                        "\(id) would keep \(child.known.count + new) handles, more than the relay keeps per child (\(limit)); "
                            + "remove some first")
                }
            }
            learn(handles, child: child, until: nil, actions: [String](), now: r.now)
        } else {
            var removed: [NormalizedHandle] = []
            for h in handles {
                guard let known = child.known.removeValue(forKey: h) else { continue }
                persist(.unknownHandle(known.record(child: child, handle: h)))
                if known.isKnown(at: r.now) { removed.append(h) }
            }
            announceKnown(child: child, added: [], removed: removed, now: r.now)
        }
        let count = child.known.values.filter { $0.isKnown(at: r.now) }.count
        return ["child": .string(id), "known": .int(Int64(count))]
    }

    /// The children a guardian request covers: the one named in `child`, or all of the family.
    private func childrenInScope(_ r: Request, includeRemoved: Bool = false) throws(RequestError) -> [Member] {
        let family = r.member.family
        if let id = try r.optionalString("child") {
            guard let child = members[id], child.record.role == .child, child.family === family,
                includeRemoved || !child.isRemoved
            else { throw RequestError(.notFound, "no child \(id) in your family") }
            return [child]
        }
        if includeRemoved {
            return members.values.filter { $0.family === family && $0.record.role == .child }.sorted { $0.id < $1.id }
        }
        return family.children
    }

    /// Makes handles known for a child, permanently (`until` nil) or until an instant.
    func learn(
        _ handles: some Collection<NormalizedHandle>, child: Member, until: Timestamp?, actions: some Collection<String>,
        now: Timestamp
    ) {
        var added: [NormalizedHandle] = []
        for h in handles {
            let before = child.known[h]
            let addsActions = !actions.allSatisfy((before?.actions ?? []).contains)
            // Known already for at least as long, with these actions (a contact approved
            // again, the usual case): nothing would change, and no deadline is added.
            if let b = before, until.map({ u in b.until.map { $0 >= u } ?? false }) ?? b.permanent, !addsActions {
                continue
            }
            var entry: KnownHandle
            if let before {
                entry = before
            } else {
                lastKnownHandleRow += 1
                entry = KnownHandle(row: lastKnownHandleRow)
            }
            if let until {
                entry.until = max(entry.until ?? until, until)
                if entry.until != before?.until { addDeadline(until, child: child, handle: h) }
            } else {
                entry.permanent = true
            }
            if addsActions {
                var all = entry.actions
                for a in actions where !all.contains(a) { all.append(a) }
                entry.actions = shared(actions: all)
            }
            child.known[h] = entry
            persist(.knownHandle(entry.record(child: child, handle: h)))
            if !(before?.isKnown(at: now) ?? false) { added.append(h) }
        }
        announceKnown(child: child, added: added, removed: [], now: now)
    }

    /// `actions`, as held by every known handle approved with the same list: one array for
    /// them all. Once `sharedActionsLimit` lists are held (never let go: the first seen), a
    /// list not among them is returned as it is, held by its handle alone.
    func shared(actions: [String]) -> [String] {
        if let i = sharedActions.firstIndex(of: actions) { return sharedActions[i] }
        if sharedActions.count < Self.sharedActionsLimit { sharedActions.insert(actions) }
        return actions
    }

    func announceKnown(child: Member, added: [NormalizedHandle], removed: [NormalizedHandle], now: Timestamp) {
        guard !added.isEmpty || !removed.isEmpty else { return }
        appendEvent(
            to: child, topic: nil, type: "knownHandlesChanged",
            ["added": .array(added.map(\.json)), "removed": .array(removed.map(\.json))], now: now)
    }
}
