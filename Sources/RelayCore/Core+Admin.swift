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
        let token = Token.generate()
        let record = MemberRecord(id: member, family: family, role: role, tokenHash: Token.hash(token))
        let m = Member(record, family: f)
        add(m)
        persist(.member(record))
        if role == .guardian {
            // A new guardian learns of every question of the family pending now (§6).
            for child in f.children {
                for id in child.questionOrder {
                    guard let q = questions[id], q.status == .pending else { continue }
                    appendEvent(to: m, topic: nil, type: "question", ["question": questionJSON(q)], now: r.now)
                }
            }
        }
        return ["member": .string(member), "role": .string(role.rawValue), "family": .string(family), "token": .string(token)]
    }

    func removeMember(_ r: Request) throws(RequestError) -> ReplyFields {
        let id = try r.string("member")
        guard let m = members[id], !m.isRemoved else { throw RequestError(.notFound, "no member \(id)") }
        m.record.removed = true
        persist(.member(m.record))
        for c in m.live { close(c.id, .memberRemoved) }
        for durable in m.sessions.values { durable.dirty = false }  // their rows go now: no late cursor write
        m.sessions = [:]
        persist(.dropSessions(member: id))
        if m.record.role == .guardian {
            m.family.guardians.removeAll { $0 === m }
        } else {
            m.family.children.removeAll { $0 === m }
            for qid in m.questionOrder {
                if let q = questions[qid], q.status == .pending { close(question: q, reason: .cancelled, now: r.now) }
            }
        }
        return ["member": .string(id)]
    }

    func rotateToken(_ r: Request) throws(RequestError) -> ReplyFields {
        let id = try r.string("member")
        guard let m = members[id], !m.isRemoved else { throw RequestError(.notFound, "no member \(id)") }
        let token = Token.generate()
        m.record.tokenHash = Token.hash(token)
        persist(.member(m.record))
        for c in m.live { close(c.id, .tokenRotated) }
        return ["member": .string(id), "token": .string(token)]
    }

    /// `connections` and `sessions` count members' connections, open or saying hello:
    /// admin connections, the one asking included, are left out.
    func status(_ r: Request) throws(RequestError) -> ReplyFields {
        let ofMembers = connections.values.filter { $0.session?.role != .admin }
        return [
            "connections": .int(Int64(ofMembers.count)),
            "sessions": .int(Int64(ofMembers.filter { $0.session != nil }.count)),
            "families": .int(Int64(families.count)),
            "members": .int(Int64(members.values.filter { !$0.isRemoved }.count)),
            "pendingQuestions": .int(Int64(members.values.reduce(0) { $0 + $1.pendingQuestions })),
            "framesIn": .int(Int64(framesIn)),
            "framesOut": .int(Int64(framesOut)),
            "uptimeSeconds": .int((r.now.milliseconds - startedAt.milliseconds) / 1000),
        ]
    }
}
