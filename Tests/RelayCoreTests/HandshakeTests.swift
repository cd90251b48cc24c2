@testable import RelayCore
import RelayProtocol
import XCTest

final class HandshakeTests: XCTestCase {
    func testFirstFrameMustBeHello() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        for body in [#"{"type":"ping"}"#, #"{"type":"limits","id":"x"}"#, "not json", "[1]", #"{"id":"n"}"#] {
            let c = h.connect()
            h.sendRaw(c, Array(body.utf8))
            let frames = h.drain(c)
            XCTAssertEqual(frames.first?["code"]?.string, "unauthorized", body)
            XCTAssertEqual(h.closed[c], .handshakeFailed, body)
            if body.contains("\"id\"") { XCTAssertNotNil(frames.first?["re"], body) }
        }
    }

    func testWrongTokenIsUnauthorizedWithoutRevealingTheMember() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        var messages: Set<String> = []
        for (member, token) in [("c1", "nope"), ("nobody", "nope"), ("c1", h.tokens["g1"]!)] {
            let c = h.connect()
            h.send(c, ["type": "hello", "id": "h1", "protocol": 1, "member": .string(member), "token": .string(token)])
            let r = h.drain(c).first!
            XCTAssertEqual(r["code"]?.string, "unauthorized")
            XCTAssertEqual(r["re"]?.string, "h1")
            messages.insert(r["message"]!.string!)
            XCTAssertNotNil(h.closed[c])
        }
        XCTAssertEqual(messages.count, 1, "the same message whether or not the member exists")
    }

    /// A member bound to a Unix account says hello from it with no token; no other account
    /// can, the account cannot act as another member, and the refusals do not tell who exists.
    func testAMemberBoundToAUnixAccountSaysHelloByItWithoutAToken() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let a = h.admin()
        let added = h.ok(a, ["type": "addMember", "family": "fam", "member": "kid", "role": "child", "unixUID": 1001])
        XCTAssertEqual(added["unixUID"]?.int, 1001)
        XCTAssertNil(added["token"], "no token is issued to a member bound to an account")
        _ = h.error(a, ["type": "addMember", "family": "fam", "member": "kid2", "role": "child", "unixUID": 1001], .conflict)
        for uid: Int64 in [-1, 0, 4_294_967_295, 4_294_967_296] {
            _ = h.error(a, ["type": "addMember", "family": "fam", "member": "kid3", "role": "child", "unixUID": .int(uid)], .badRequest)
        }
        XCTAssertNil(h.core.members["kid3"], "none of them added")
        _ = h.error(a, ["type": "rotateToken", "member": "kid"], .badRequest)

        func hello(_ member: String?, uid: UInt32?) -> JSONObject {
            let c = h.connect(uid: uid)
            var f: JSONObject = ["type": "hello", "id": "h", "protocol": 1]
            if let member { f["member"] = .string(member) }
            h.send(c, f)
            return h.drain(c).first ?? [:]
        }
        XCTAssertEqual(hello("kid", uid: 1001)["type"]?.string, "welcome")
        XCTAssertEqual(hello("kid", uid: 1002)["code"]?.string, "unauthorized", "another account")
        let unbound = hello("c1", uid: 1001), unknown = hello("nobody", uid: 1001)
        XCTAssertEqual(unbound["code"]?.string, "unauthorized", "another member")
        XCTAssertEqual(
            unbound["message"]?.string?.replacingOccurrences(of: "c1", with: "M"),
            unknown["message"]?.string?.replacingOccurrences(of: "nobody", with: "M"), "an unbound member and an unknown one alike")
        XCTAssertEqual(hello(nil, uid: 1001)["code"]?.string, "unauthorized", "a member is named")
        // Not with another member's token either (§13); from any other account, the token works.
        func helloWithToken(uid: UInt32?) -> JSONObject {
            let c = h.connect(uid: uid)
            h.send(c, ["type": "hello", "id": "h", "protocol": 1, "member": "c1", "token": .string(h.tokens["c1"]!)])
            return h.drain(c).first ?? [:]
        }
        let asOther = helloWithToken(uid: 1001)
        XCTAssertEqual(asOther["code"]?.string, "unauthorized", "a bound account is only ever its member")
        XCTAssertEqual(
            asOther["message"]?.string, #"this Unix account (uid 1001) is bound to member "kid", and says hello only as that member"#)
        XCTAssertEqual(helloWithToken(uid: 1002)["type"]?.string, "welcome")
        XCTAssertEqual(helloWithToken(uid: nil)["type"]?.string, "welcome")

        // Removed, the account may be bound again; the store keeps the binding across a restart.
        h.ok(a, ["type": "removeMember", "member": "kid"])
        h.ok(a, ["type": "addMember", "family": "fam", "member": "kid2", "role": "child", "unixUID": 1001])
        try h.restart()
        XCTAssertEqual(hello("kid2", uid: 1001)["type"]?.string, "welcome")
        XCTAssertEqual(hello("kid", uid: 1001)["code"]?.string, "unauthorized")
        XCTAssertEqual(helloWithToken(uid: 1001)["code"]?.string, "unauthorized", "bound again, after a restart")
        h.ok(h.admin(), ["type": "removeMember", "member": "kid2"])
        XCTAssertEqual(helloWithToken(uid: 1001)["type"]?.string, "welcome", "an account bound to no member needs only a token")
    }

    func testUnsupportedProtocolAndAdminOnlyForOwnUID() throws {
        let h = try CoreHarness()
        let c = h.connect()
        h.send(c, ["type": "hello", "id": "h", "protocol": 2, "admin": true])
        XCTAssertEqual(h.drain(c).first?["code"]?.string, "unsupportedProtocol")
        let huge = h.connect()
        h.sendRaw(huge, Array(#"{"type":"hello","id":"h","protocol":1e400}"#.utf8))
        let said = h.drain(huge).first ?? [:]
        XCTAssertEqual(said["code"]?.string, "unsupportedProtocol")
        XCTAssertEqual(said["message"]?.string, #"this relay speaks protocol 1, not "protocol": a number out of range"#)
        let null = h.connect()
        h.sendRaw(null, Array(#"{"type":"hello","id":"h","protocol":null}"#.utf8))
        XCTAssertEqual(h.drain(null).first?["message"]?.string, #"this relay speaks protocol 1, not "protocol": null"#)
        let quoted = h.connect()
        h.sendRaw(quoted, Array(#"{"type":"hello","id":"h","protocol":"1"}"#.utf8))
        let told = h.drain(quoted).first ?? [:]
        XCTAssertEqual(told["code"]?.string, "unsupportedProtocol")
        XCTAssertEqual(told["message"]?.string, #"this relay speaks protocol 1, not "protocol": "1" (send the number 1, not a string)"#)
        let unsaid = h.connect()
        h.send(unsaid, ["type": "hello", "id": "h", "member": "c1", "token": "t"])
        XCTAssertEqual(h.drain(unsaid).first?["code"]?.string, "unauthorized", "a hello with no protocol is not a valid one (§1)")
        XCTAssertNotNil(h.closed[unsaid])
        let numbered = h.connect()
        h.send(numbered, ["type": "hello", "id": "h", "protocol": 1, "member": "c1", "token": 12345])
        XCTAssertEqual(h.drain(numbered).first?["message"]?.string, #""token" must be a string, not 12345"#)
        let stranger = h.connect(uid: 4242)
        h.send(stranger, ["type": "hello", "id": "h", "protocol": 1, "admin": true])
        XCTAssertEqual(h.drain(stranger).first?["code"]?.string, "unauthorized")
        let root = h.connect(uid: 0)
        h.send(root, ["type": "hello", "id": "h", "protocol": 1, "admin": true])
        XCTAssertEqual(h.drain(root).first?["role"]?.string, "admin")
    }

    func testWelcomeFieldsAndSecondHello() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, w) = h.login("c1", session: "tab")
        XCTAssertEqual(w["role"]?.string, "child")
        XCTAssertEqual(w["family"]?.string, "fam")
        XCTAssertEqual(w["session"]?.string, "tab")
        XCTAssertEqual(w["head"]?.int, 0)
        XCTAssertEqual(w["cursor"]?.int, 0)
        XCTAssertEqual(w["maxFrameBytes"]?.int, 1_048_576)
        XCTAssertEqual(w["heartbeatSeconds"]?.int, 15)
        _ = h.error(c, ["type": "hello", "protocol": 1, "member": "c1", "token": .string(h.tokens["c1"]!)], .badRequest)
        XCTAssertNil(h.closed[c], "a second hello keeps the connection")
    }

    /// A hello needs an id: without one it is not a valid hello, which gets `unauthorized`
    /// and a close (§1, §4); an ephemeral session ignores `resume`, whatever it holds (§4).
    func testAHelloNeedsAnIdAndAnEphemeralSessionIgnoresResume() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let token = JSON.string(h.tokens["c1"]!)
        let c = h.connect()
        h.send(c, ["type": "hello", "protocol": 1, "member": "c1", "token": token])
        XCTAssertEqual(h.drain(c).first?["code"]?.string, "unauthorized")
        XCTAssertNotNil(h.closed[c])
        let e = h.connect()
        h.send(e, ["type": "hello", "id": "h", "protocol": 1, "member": "c1", "token": token, "resume": -5])
        XCTAssertEqual(h.drain(e).first?["type"]?.string, "welcome")
        XCTAssertNil(h.closed[e])
        let d = h.connect()
        h.send(d, ["type": "hello", "id": "h", "protocol": 1, "member": "c1", "token": token, "session": "s", "resume": -5])
        XCTAssertEqual(h.drain(d).first?["code"]?.string, "unauthorized", "a durable session's resume is a seq")
    }

    /// A hello that names no member, gives `admin` as anything but a boolean, or asks to be
    /// both a member and an admin is refused with what is wrong with it.
    func testAHelloThatIsNeitherAMembersNorAnAdminsSaysWhatIsMissing() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let token = JSON.string(h.tokens["c1"]!)
        for (hello, said) in [
            (["admin": false] as JSONObject, #"hello needs "member" and its "token""#),
            ([:], #"hello needs "member" and its "token""#),
            (["admin": "true"], #"admin must be true or false, not "true""#),
            (["admin": true, "member": "c1", "token": token], "a hello is a member's (member and token) or an admin's"),
        ] {
            let c = h.connect()
            var f: JSONObject = ["type": "hello", "id": "h", "protocol": 1]
            for field in hello.fields { f[field.key] = field.value }
            h.send(c, f)
            let r = h.drain(c).first
            XCTAssertEqual(r?["code"]?.string, "unauthorized", "\(hello)")
            XCTAssertTrue(r?["message"]?.string?.contains(said) == true, "\(hello): \(r?["message"]?.string ?? "no reply")")
            XCTAssertNotNil(h.closed[c])
        }
        // A member's hello may say it is not an admin.
        let c = h.connect()
        h.send(c, ["type": "hello", "id": "h", "protocol": 1, "member": "c1", "token": token, "admin": false])
        XCTAssertEqual(h.drain(c).first?["type"]?.string, "welcome")
    }

    func testBadFramesAfterHelloKeepTheConnection() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        h.sendRaw(c, Array("{".utf8))
        XCTAssertEqual(h.drain(c).first?["code"]?.string, "badFrame")
        h.sendRaw(c, Array(#"{"id":"q","type":3}"#.utf8))
        let r = h.drain(c).first!
        XCTAssertEqual(r["code"]?.string, "badFrame")
        XCTAssertEqual(r["re"]?.string, "q")
        // Nested deeper than the parser takes, but JSON: refused with its id.
        let deep = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        h.sendRaw(c, Array(#"{"type":"limits","id":"d","extra":\#(deep)}"#.utf8))
        let tooDeep = h.drain(c).first!
        XCTAssertEqual(tooDeep["code"]?.string, "badFrame")
        XCTAssertEqual(tooDeep["re"]?.string, "d")
        h.sendRaw(c, Array(#"{"type":"limits","id":"e","extra":\#(deep.dropLast())}"#.utf8))  // and not JSON
        let notJSON = h.drain(c).first!
        XCTAssertEqual(notJSON["code"]?.string, "badFrame")
        XCTAssertNil(notJSON["re"])
        XCTAssertTrue(notJSON["message"]?.string?.contains("not valid UTF-8 JSON") ?? false)
        // Half a surrogate pair, escaped: JSON, though no text holds it. Read as U+FFFD: an
        // unknown field holding one is ignored, a known one keeps the rest of its text.
        h.sendRaw(c, Array(#"{"type":"limits","id":"s","note":"\ud83d"}"#.utf8))
        let unpaired = h.drain(c).first!
        XCTAssertEqual(unpaired["type"]?.string, "ok", "\(unpaired)")
        XCTAssertEqual(unpaired["re"]?.string, "s")
        let (g, _) = h.login("g1")
        let id = UUID().uuidString
        h.sendRaw(
            c,
            Array(
                #"{"type":"ask","id":"a","question":{"id":"\#(id)","topic":{"kind":"communication","personInformation":[{"handle":{"value":"+15550100","kind":"phoneNumber"},"nameComponents":{"givenName":"Kim\ud83d"}}]}}}"#
                    .utf8))
        XCTAssertEqual(h.drain(c).first?["type"]?.string, "ok")
        let asked = h.events(g, "question").first?["question"]?["topic"]?["personInformation"]?.array?.first?["nameComponents"]
        XCTAssertEqual(asked?["givenName"]?.string, "Kim\u{FFFD}")
        _ = h.error(c, ["type": "frobnicate"], .unknownType)
        h.send(c, ["type": "limits"])
        XCTAssertEqual(h.drain(c).first?["code"]?.string, "badRequest", "a request without id")
        h.send(c, ["type": "ack", "seq": "x"])
        XCTAssertEqual(h.drain(c).first?["code"]?.string, "badRequest", "a malformed ack")
        h.send(c, ["type": "ping"])
        XCTAssertEqual(h.drain(c).first?["type"]?.string, "pong")
        XCTAssertNil(h.closed[c])
        h.core.framingViolation(c, .frameTooLarge, "too big")
        h.pump()
        XCTAssertEqual(h.drain(c).first?["code"]?.string, "frameTooLarge")
        XCTAssertEqual(h.closed[c], .framingViolation)
    }

    /// The request table is a list: each request type must be in it exactly once.
    func testEveryRequestTypeHasOneHandler() {
        let names = RelayCore.handlers.map(\.key)
        XCTAssertEqual(names.count, Set(names).count, "a request type is named twice: \(names)")
        XCTAssertEqual(
            Set(names),
            [
                "subscribe", "ask", "cancel", "questions", "limits", "knownHandles", "answer", "pending", "setLimits",
                "addKnownHandles", "removeKnownHandles", "history", "createFamily", "addMember", "removeMember", "rotateToken",
                "status", "familyLink", "families",
            ])
    }

    func testRolesAreEnforced() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let a = h.admin()
        _ = h.error(c, ["type": "pending"], .forbidden)
        _ = h.error(c, ["type": "status"], .forbidden)
        _ = h.error(g, ["type": "ask", "question": .object(h.question())], .forbidden)
        _ = h.error(g, ["type": "subscribe", "topics": []], .forbidden)
        _ = h.error(a, ["type": "limits"], .forbidden)
        _ = h.error(a, ["type": "answer", "questionId": "x", "choice": "approve"], .forbidden)
        let refused = h.error(g, ["type": "createFamily", "family": "x"], .forbidden)["message"]?.string ?? ""
        XCTAssertTrue(refused.hasPrefix("createFamily is for an admin, and g1 is a guardian"), refused)
    }

    func testSessionReplacedClosesTheOlderConnection() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (first, _) = h.login("g1", session: "phone")
        let (second, _) = h.login("g1", session: "phone")
        XCTAssertEqual(h.closed[first], .sessionReplaced)
        XCTAssertNil(h.closed[second])
        XCTAssertEqual(h.drain(first).last?["reason"]?.string, "sessionReplaced")
    }

    /// The durable sessions of `member` the store holds, by name.
    private func storedSessions(_ h: CoreHarness, of member: String) throws -> [String] {
        try h.store.commit(h.core.takeChanges())
        return try h.store.load().sessions.filter { $0.member == member }.map(\.name).sorted()
    }

    func testANewSessionPastTheLimitForgetsTheLeastRecentlyUsedClosedOne() throws {
        let h = try CoreHarness { $0.maxSessionsPerMember = 3 }
        h.standardFamilies()
        for name in ["a", "b", "c", "a"] { h.core.disconnected(h.login("g1", session: name).0) }
        let (pad, _) = h.login("g1", session: "pad")  // b was used least recently
        XCTAssertEqual(try storedSessions(h, of: "g1"), ["a", "c", "pad"])
        XCTAssertNil(h.closed[pad])

        // Open sessions are never forgotten: with a and pad open, d takes c's place.
        let (a, _) = h.login("g1", session: "a")
        let (d, _) = h.login("g1", session: "d")
        XCTAssertEqual(try storedSessions(h, of: "g1"), ["a", "d", "pad"])
        XCTAssertNil(h.closed[a])
        XCTAssertNil(h.closed[d])

        // With every one open, a new one is refused and nothing is forgotten.
        let e = h.connect(uid: 5000)
        h.send(e, ["type": "hello", "id": "h", "protocol": 1, "member": "g1", "token": .string(h.tokens["g1"]!), "session": "e"])
        XCTAssertEqual(h.drain(e).first?["code"]?.string, "busy")
        XCTAssertEqual(h.closed[e], .handshakeFailed)
        XCTAssertEqual(try storedSessions(h, of: "g1"), ["a", "d", "pad"])
        XCTAssertEqual(try storedSessions(h, of: "g2"), [], "another member's limit is its own")
    }

    func testAfterARestartTheSessionFurthestBehindIsForgottenFirst() throws {
        let h = try CoreHarness { $0.maxSessionsPerMember = 2 }
        h.standardFamilies()
        let (ahead, _) = h.login("c1", session: "ahead")
        h.core.disconnected(h.login("c1", session: "behind").0)
        let a = h.admin()
        h.ok(a, ["type": "setLimits", "child": "c1", "enabled": false])  // an event for c1
        h.send(ahead, ["type": "ack", "seq": 1])
        h.core.flushCursors()
        h.core.disconnected(ahead)
        try h.restart()
        let (_, welcome) = h.login("c1", session: "new")
        XCTAssertEqual(welcome["cursor"]?.int, 1)
        XCTAssertEqual(try storedSessions(h, of: "c1"), ["ahead", "new"])
        // A forgotten session is new when it comes back: without `resume` it starts at the head.
        let (_, again) = h.login("c1", session: "behind")
        XCTAssertEqual(again["cursor"]?.int, 1)
    }

    /// Behind is in what it acknowledged, which holds back what may go early: a session that
    /// started at the head has acknowledged less than one that resumed below it.
    func testAfterARestartTheSessionThatAcknowledgedLeastIsForgottenFirst() throws {
        let h = try CoreHarness { $0.maxSessionsPerMember = 2 }
        h.standardFamilies()
        let a = h.admin()
        for enabled in [false, true] { h.ok(a, ["type": "setLimits", "child": "c1", "enabled": .bool(enabled)]) }  // events 1, 2
        h.core.disconnected(h.login("c1", session: "late").0)  // cursor 2, nothing acknowledged
        h.core.disconnected(h.login("c1", session: "resumed", resume: 1).0)  // cursor 1, acknowledged 1
        try h.restart()
        _ = h.login("c1", session: "new")
        XCTAssertEqual(try storedSessions(h, of: "c1"), ["new", "resumed"])
    }
}
