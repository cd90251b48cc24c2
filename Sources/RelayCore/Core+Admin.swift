// Admin requests (§7): families, members, tokens and the relay's status.

import RelayProtocol
import RelayModel

extension RelayCore {
    func createFamily(_ r: Request) throws(RequestError) -> ReplyFields {
        let family = try r.string("family")
        guard Identifier.isValid(family) else {
            throw RequestError(.badRequest, "family id must match [A-Za-z0-9._-]{1,64}")
        }
        guard families[family] == nil else { throw RequestError(.conflict, "family \(family) already exists") }
        families[family] = Family(id: family)
        persist(.family(family))
        note(r, "created family \(family)")
        return ["family": .string(family)]
    }

    func addMember(_ r: Request) throws(RequestError) -> ReplyFields {
        let family = try r.string("family")
        let member = try r.string("member")
        let roleName = try r.string("role")
        guard Identifier.isValid(member) else {
            throw RequestError(.badRequest, "member id must match [A-Za-z0-9._-]{1,64}")
        }
        guard let role = Role(rawValue: roleName), role != .admin else {
            throw RequestError(.badRequest, "role must be child or guardian")
        }
        guard let f = families[family] else { throw RequestError(.notFound, "no family \(family)") }
        if let taken = members[member] {
            throw RequestError(
                .conflict,
                taken.isRemoved
                    ? "member id \(member) belonged to a removed member and is never reused (member ids are unique across all families)"
                    : "member \(member) already exists, in family \(taken.family.id) (member ids are unique across all families)")
        }
        var unixUID: UInt32?
        switch r.frame["unixUID"] {
        case nil, .null?: break
        case let v?:
            guard let n = v.int, n >= 0, n < Int64(UInt32.max) else {
                // UInt32.max is (uid_t)-1, which the kernel reserves for "no account".
                throw RequestError(.badRequest, "\"unixUID\" must be a Unix account's uid (a whole number from 1 to 4294967294)")
            }
            guard n != 0 else {
                // Bound, an account can say hello as that member only: root, the machine's
                // administrator, would lose its token hellos as any other member.
                throw RequestError(
                    .badRequest,
                    "uid 0 is root's, the machine's administrator, not one member's: bind the account the member's programs run as")
            }
            unixUID = UInt32(n)
            if let bound = boundMembers[UInt32(n)] {
                throw RequestError(.conflict, "the account with uid \(n) is already bound to member \(bound.record.id)")
            }
        }
        // A member bound to an account has a token nobody is told: it says hello by its account.
        let token = Token.generate()
        let record = MemberRecord(id: member, family: family, role: role, tokenHash: Token.hash(token), unixUID: unixUID)
        let m = Member(record, family: f)
        add(m)
        persist(.member(record))
        note(r, "added \(role.rawValue) \(member) to family \(family)\(unixUID.map { ", bound to uid \($0)" } ?? "")")
        if role == .guardian {
            // A new guardian learns of every question of the family pending now (§6).
            for child in f.children {
                for q in heldQuestions(of: child) where q.status == .pending {
                    appendEvent(to: m, topic: nil, type: "question", ["question": questionJSON(q)], now: r.now)
                }
            }
        }
        var reply: JSONObject = ["member": .string(member), "role": .string(role.rawValue), "family": .string(family)]
        if let unixUID { reply["unixUID"] = .int(Int64(unixUID)) } else { reply["token"] = .string(token) }
        return .object(reply)
    }

    func removeMember(_ r: Request) throws(RequestError) -> ReplyFields {
        let id = try r.string("member")
        guard let m = members[id], !m.isRemoved else { throw RequestError(.notFound, "no member \(id)") }
        m.record.removed = true
        if let uid = m.record.unixUID { boundMembers[uid] = nil }
        m.record.unixUID = nil  // the account may be bound again
        persist(.member(m.record))
        note(r, "removed member \(id) of family \(m.family.id)")
        for c in m.live { close(c.id, .memberRemoved) }
        for durable in m.sessions.values { durable.dirty = false }  // their rows go now: no late cursor write
        m.sessions = [:]
        persist(.dropSessions(member: id))
        if m.record.role == .guardian {
            m.family.guardians.removeAll { $0 === m }
        } else {
            m.family.children.removeAll { $0 === m }
            for q in heldQuestions(of: m) where q.status == .pending { close(question: q, reason: .cancelled, now: r.now) }
        }
        return ["member": .string(id)]
    }

    func rotateToken(_ r: Request) throws(RequestError) -> ReplyFields {
        let id = try r.string("member")
        guard let m = members[id], !m.isRemoved else { throw RequestError(.notFound, "no member \(id)") }
        if let uid = m.record.unixUID {
            throw RequestError(.badRequest, "\(id) is bound to the account with uid \(uid) and says hello by it, with no token")
        }
        let token = Token.generate()
        m.record.tokenHash = Token.hash(token)
        persist(.member(m.record))
        note(r, "rotated the token of \(id)")
        for c in m.live { close(c.id, .tokenRotated) }
        return ["member": .string(id), "token": .string(token)]
    }

    /// The families with their current members, in order of their ids (an extension,
    /// protocol.md): all of them, or the one `family` names. What an operator needs to find
    /// a member again; no token is shown. A reply holds about `listReplyBytes` (at least one
    /// family); when more remain it says `more` and gives `next`, for `after`.
    func listFamilies(_ r: Request) throws(RequestError) -> ReplyFields {
        var chosen: [Family]
        if let id = try r.optionalString("family") {
            guard let f = families[id] else { throw RequestError(.notFound, "no family \(id)") }
            chosen = [f]
        } else {
            let after = try r.optionalString("after")
            chosen = families.values.filter { f in after.map { f.id > $0 } ?? true }
            chosen.sort { $0.id < $1.id }
        }
        func describe(_ m: Member) -> JSON {
            var fields: JSONObject = [
                "member": .string(m.id), "role": .string(m.record.role.rawValue), "connections": .int(Int64(m.live.count)),
            ]
            if let uid = m.record.unixUID { fields["unixUID"] = .int(Int64(uid)) }
            if m.record.role == .child {
                fields["limitsEnabled"] = .bool(m.record.limitsEnabled)
                fields["pendingQuestions"] = .int(Int64(m.pendingQuestions))
            }
            return .object(fields)
        }
        var list: [JSON] = []
        var bytes = 0
        for (i, f) in chosen.enumerated() {
            if i > 0 && bytes > config.listReplyBytes {
                return ["families": .array(list), "more": true, "next": .string(chosen[i - 1].id)]
            }
            let members = (f.guardians + f.children).sorted { $0.id < $1.id }
            let entry = JSON.object(["family": .string(f.id), "members": .array(members.map(describe))])
            bytes += entry.encoded.count + 1
            list.append(entry)
        }
        return ["families": .array(list)]
    }

    /// `connections` and `sessions` count members' connections, open or saying hello:
    /// admin connections, the one asking included, are left out.
    func status(_ r: Request) throws(RequestError) -> ReplyFields {
        let ofMembers = connections.values.filter { $0.session?.role != .admin }
        let counters: ReplyFields = [
            "connections": .int(Int64(ofMembers.count)),
            "sessions": .int(Int64(ofMembers.filter { $0.session != nil }.count)),
            "families": .int(Int64(families.count)),
            "members": .int(Int64(members.values.filter { !$0.isRemoved }.count)),
            "pendingQuestions": .int(Int64(members.values.reduce(0) { $0 + $1.pendingQuestions })),
            "framesIn": .int(Int64(framesIn)),
            "framesOut": .int(Int64(framesOut)),
            "uptimeSeconds": .int((r.now.milliseconds - startedAt.milliseconds) / 1000),
        ]
        // Which relay runs (after an upgrade, say): an extension (protocol.md).
        let version: JSONObject = config.version.isEmpty ? [:] : ["version": .string(config.version)]
        return counters.adding(version).adding(hubStatus)
    }

    /// The link to the family hub, for `status`: none without one.
    private var hubStatus: JSONObject {
        guard let device = config.hubDevice else { return [:] }
        var hub = linkState
        hub["device"] = .string(device)
        hub["outbox"] = .int(Int64(hubOutbox.count))
        hub["inbox"] = hubLink.inbox.map { .int(Int64($0)) } ?? .null
        return ["hub": .object(hub)]
    }
}
