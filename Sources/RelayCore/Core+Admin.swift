// Admin requests (§7): families, members, tokens and the relay's status.

import RelayProtocol
import RelayStore

extension RelayCore {
    func createFamily(_ r: Request) throws(RequestError) -> ReplyFields {
        let family = try r.string("family")
        guard Identifier.isValid(family) else {
            throw RequestError(.badRequest, "family id must match [A-Za-z0-9._-]{1,64}")
        }
        guard families[family] == nil else { throw RequestError(.conflict, "family \(family) already exists") }
        families[family] = Family()
        store.saveFamily(family)
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
        guard families[family] != nil else { throw RequestError(.notFound, "no family \(family)") }
        guard members[member] == nil else {
            throw RequestError(.conflict, "member id \(member) is taken (ids of removed members are never reused)")
        }
        let token = Token.generate()
        let record = MemberRecord(id: member, family: family, role: role, tokenHash: Token.hash(token))
        members[member] = record
        store.saveMember(record)
        if role == .guardian {
            families[family]?.guardians.append(member)
            // A new guardian learns of every question of the family pending now (§6).
            for child in families[family]?.children ?? [] {
                for id in questionsByChild[child] ?? QuestionOrder() {
                    guard let q = questions[id], q.status == .pending else { continue }
                    appendEvent(to: member, topic: nil, ["type": "question", "question": questionJSON(q)], now: r.now)
                }
            }
        } else {
            families[family]?.children.append(member)
        }
        return ["member": .string(member), "role": .string(role.rawValue), "family": .string(family), "token": .string(token)]
    }

    func removeMember(_ r: Request) throws(RequestError) -> ReplyFields {
        let id = try r.string("member")
        guard var m = members[id], !m.removed else { throw RequestError(.notFound, "no member \(id)") }
        m.removed = true
        members[id] = m
        store.saveMember(m)
        for conn in live[id] ?? [] { close(conn, .memberRemoved) }
        durable[id] = nil
        store.deleteSessions(member: id)
        if m.role == .guardian {
            families[m.family]?.guardians.removeAll { $0 == id }
        } else {
            families[m.family]?.children.removeAll { $0 == id }
            for qid in questionsByChild[id] ?? QuestionOrder() {
                if let q = questions[qid], q.status == .pending { close(question: q, reason: .cancelled, now: r.now) }
            }
        }
        return ["member": .string(id)]
    }

    func rotateToken(_ r: Request) throws(RequestError) -> ReplyFields {
        let id = try r.string("member")
        guard var m = members[id], !m.removed else { throw RequestError(.notFound, "no member \(id)") }
        let token = Token.generate()
        m.tokenHash = Token.hash(token)
        members[id] = m
        store.saveMember(m)
        for conn in live[id] ?? [] { close(conn, .tokenRotated) }
        return ["member": .string(id), "token": .string(token)]
    }

    func status(_ r: Request) throws(RequestError) -> ReplyFields {
        [
            "connections": .int(Int64(connections.count)),
            "sessions": .int(Int64(connections.values.filter { $0.session != nil }.count)),
            "families": .int(Int64(families.count)),
            "members": .int(Int64(members.values.filter { !$0.removed }.count)),
            "pendingQuestions": .int(Int64(pendingByChild.values.reduce(0, +))),
            "framesIn": .int(Int64(framesIn)),
            "framesOut": .int(Int64(framesOut)),
            "uptimeSeconds": .int((r.now.milliseconds - startedAt.milliseconds) / 1000),
        ]
    }
}
