import RelayCore
import RelayProtocol
import RelayModel
import RelayStore
import XCTest

final class AdminAndExpiryTests: XCTestCase {
    func testAdminConflictsAndNotFound() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let a = h.admin()
        _ = h.error(a, ["type": "createFamily", "family": "fam"], .conflict)
        _ = h.error(a, ["type": "createFamily", "family": "bad id!"], .badRequest)
        let taken = h.error(a, ["type": "addMember", "family": "other", "member": "c1", "role": "child"], .conflict)
        XCTAssertEqual(taken["message"]?.string, "member c1 already exists, in family fam (member ids are unique across all families)")
        _ = h.error(a, ["type": "addMember", "family": "nope", "member": "x", "role": "child"], .notFound)
        _ = h.error(a, ["type": "addMember", "family": "fam", "member": "x", "role": "admin"], .badRequest)
        _ = h.error(a, ["type": "removeMember", "member": "ghost"], .notFound)
        _ = h.error(a, ["type": "rotateToken", "member": "ghost"], .notFound)
        _ = h.error(a, ["type": "setLimits", "child": "g1", "enabled": true], .notFound)
        let st = h.ok(a, ["type": "status"])
        XCTAssertEqual(st["families"]?.int, 2)
        XCTAssertEqual(st["members"]?.int, 6)
        for key in ["connections", "sessions", "pendingQuestions", "framesIn", "framesOut", "uptimeSeconds"] {
            XCTAssertNotNil(st[key]?.int, key)
        }
        XCTAssertEqual(st["connections"]?.int, 0, "two admin connections are open, and neither is counted")
        XCTAssertEqual(st["sessions"]?.int, 0)
        _ = h.login("c1")
        _ = h.connect(uid: 5000)  // yet to say hello
        let busier = h.ok(a, ["type": "status"])
        XCTAssertEqual(busier["connections"]?.int, 2)
        XCTAssertEqual(busier["sessions"]?.int, 1)

        h.ok(a, ["type": "removeMember", "member": "c2"])
        let removed = h.error(a, ["type": "addMember", "family": "fam", "member": "c2", "role": "child"], .conflict)
        XCTAssertEqual(
            removed["message"]?.string,
            "member id c2 belonged to a removed member and is never reused (member ids are unique across all families)")
    }

    func testFamiliesListTheCurrentMembersInPagesAndSurviveARestart() throws {
        let h = try CoreHarness(configure: { $0.listReplyBytes = 100 })  // a page holds about one family
        h.standardFamilies()
        let a = h.admin()
        h.ok(a, ["type": "removeMember", "member": "g2"])
        let (c1, _) = h.login("c1")
        h.ok(c1, ["type": "ask", "question": .object(h.question())])
        h.ok(a, ["type": "setLimits", "child": "c2", "enabled": false])
        try h.restart()
        let (again, _) = h.login("c1")
        let b = h.admin()

        let first = h.ok(b, ["type": "families"])
        XCTAssertEqual(first["families"]?.array?.compactMap { $0.object?["family"]?.string }, ["fam"])
        XCTAssertEqual(first["more"], .bool(true))
        XCTAssertEqual(first["next"]?.string, "fam")
        let fam = first["families"]?.array?.first?.object?["members"]?.array?.compactMap(\.object) ?? []
        XCTAssertEqual(fam.map { $0["member"]?.string }, ["c1", "c2", "g1"], "the removed guardian is left out")
        XCTAssertEqual(fam[0]["pendingQuestions"]?.int, 1)
        XCTAssertEqual(fam[0]["connections"]?.int, 1)
        XCTAssertEqual(fam[0]["limitsEnabled"], .bool(true))
        XCTAssertEqual(fam[1]["limitsEnabled"], .bool(false))
        XCTAssertEqual(fam[2]["role"]?.string, "guardian")
        XCTAssertNil(fam[2]["pendingQuestions"], "a guardian asks nothing")
        XCTAssertNil(fam[0]["token"])

        let second = h.ok(b, ["type": "families", "after": "fam"])
        XCTAssertEqual(second["families"]?.array?.compactMap { $0.object?["family"]?.string }, ["other"])
        XCTAssertNil(second["more"], "the last page")
        let one = h.ok(b, ["type": "families", "family": "other"])
        XCTAssertEqual(one["families"]?.array?.first?.object?["members"]?.array?.count, 2)
        _ = h.error(b, ["type": "families", "family": "nope"], .notFound)
        _ = h.error(again, ["type": "families"], .forbidden)
    }

    func testRotateTokenClosesConnectionsAndKeepsSessions() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1", session: "app")
        let a = h.admin()
        let old = h.tokens["c1"]!
        let r = h.ok(a, ["type": "rotateToken", "member": "c1"])
        XCTAssertEqual(h.closed[c], .tokenRotated)
        let probe = h.connect()
        h.send(probe, ["type": "hello", "id": "h", "protocol": 1, "member": "c1", "token": .string(old)])
        XCTAssertEqual(h.drain(probe).first?["code"]?.string, "unauthorized")
        h.tokens["c1"] = r["token"]?.string
        let (_, w) = h.login("c1", session: "app")
        XCTAssertEqual(w["session"]?.string, "app")
    }

    func testRemoveChildCancelsItsQuestions() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        _ = h.drain(g)
        let a = h.admin()
        h.ok(a, ["type": "removeMember", "member": "c1"])
        XCTAssertEqual(h.closed[c], .memberRemoved)
        let closedForGuardian = h.events(g, "questionClosed").first
        XCTAssertEqual(closedForGuardian?["reason"]?.string, "cancelled")
        XCTAssertNil(closedForGuardian?["by"] ?? closedForGuardian?["choice"], "nobody answered")
        _ = h.error(g, ["type": "answer", "questionId": q["id"]!, "choice": "approve"], .cancelled)
        XCTAssertEqual(h.ok(g, ["type": "history"])["questions"]?.array?.first?["status"]?.string, "cancelled")
        _ = h.error(a, ["type": "addMember", "family": "fam", "member": "c1", "role": "child"], .conflict)
        XCTAssertEqual(h.ok(a, ["type": "status"])["members"]?.int, 5)
    }

    func testExpiryClosesTheQuestionWithinASecond() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1", subscribe: ["communication"])
        let (g, _) = h.login("g1")
        let q = h.question(expiresIn: 30)
        h.ok(c, ["type": "ask", "question": .object(q)])
        _ = h.drain(g)
        XCTAssertEqual(h.core.nextDeadline, Timestamp(rfc3339: q["expirationDate"]!.string!))
        h.advance(seconds: 29)
        XCTAssertTrue(h.events(c, "questionClosed").isEmpty)
        h.advance(seconds: 1)
        let closed = h.events(c, "questionClosed")
        XCTAssertEqual(closed.first?["reason"]?.string, "expired")
        XCTAssertEqual(closed.first?["defaultChoice"]?["id"]?.string, "decline")
        let closedForGuardian = h.events(g, "questionClosed").first
        XCTAssertEqual(closedForGuardian?["reason"]?.string, "expired")
        XCTAssertNil(closedForGuardian?["by"] ?? closedForGuardian?["choice"], "nobody answered")
        _ = h.error(g, ["type": "answer", "questionId": q["id"]!, "choice": "approve"], .expired)
        _ = h.error(c, ["type": "cancel", "questionId": q["id"]!], .expired)
        // Retry after expiry re-opens the question.
        let retry = h.question(id: q["id"]!.string!, expiresIn: 60)
        XCTAssertEqual(h.ok(c, ["type": "ask", "question": .object(retry)])["attempt"]?.int, 2)
        XCTAssertEqual(h.events(g, "question").first?["question"]?["status"]?.string, "pending")
    }

    func testAnswerRacingExpiryGetsExpired() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let q = h.question(expiresIn: 5)
        h.ok(c, ["type": "ask", "question": .object(q)])
        h.now = Timestamp(milliseconds: h.now.milliseconds + 5000)  // no tick has run yet
        _ = h.error(g, ["type": "answer", "questionId": q["id"]!, "choice": "approve"], .expired)
    }
}

final class BoundsTests: XCTestCase {
    /// Known handles are all held in memory: a new one's value is 2048 bytes at most, in a
    /// question or a guardian's list alike; one kept from before is still looked up and removed.
    func testAHandleValueLongerThan2048BytesIsInvalid() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let longest = String(repeating: "é", count: 1024), longer = longest + "x"  // 2048 and 2049 bytes
        func handles(_ value: String) -> JSON { .array([.object(["value": .string(value), "kind": "custom"])]) }
        XCTAssertEqual(h.ok(g, ["type": "addKnownHandles", "child": "c1", "handles": handles(longest)])["known"]?.int, 1)
        let refused = h.error(g, ["type": "addKnownHandles", "child": "c1", "handles": handles(longer)], .badRequest)
        XCTAssertTrue(refused["message"]?.string?.contains("2048 bytes at most; one of these is 2049") ?? false, "\(refused)")
        XCTAssertEqual(h.ok(c, ["type": "knownHandles", "handles": handles(longer)])["known"], [])
        XCTAssertEqual(h.ok(g, ["type": "removeKnownHandles", "child": "c1", "handles": handles(longer)])["known"]?.int, 1)
        for (value, ok) in [(longest, true), (longer, false)] {
            var q = h.question()
            q["topic"] = .object([
                "kind": "communication", "personInformation": [.object(["handle": handles(value).array![0]])],
            ])
            if ok {
                h.ok(c, ["type": "ask", "question": .object(q)])
            } else {
                let e = h.error(c, ["type": "ask", "question": .object(q)], .invalidQuestion)
                XCTAssertEqual(
                    e["message"]?.string?.contains("personInformation[0].handle's value is 2049 bytes long, more than 2048"), true, "\(e)")
            }
        }
    }

    func testAGuardianCannotMakeAChildKeepMoreHandlesThanTheLimitButAnApprovalStillCounts() throws {
        let h = try CoreHarness { $0.maxKnownHandlesPerChild = 3 }
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        func phones(_ numbers: [Int]) -> JSON {
            .array(numbers.map { .object(["value": .string("+1 555 010\($0)"), "kind": "phoneNumber"]) })
        }
        XCTAssertEqual(h.ok(g, ["type": "addKnownHandles", "child": "c1", "handles": phones([1, 2])])["known"]?.int, 2)
        _ = h.events(c, "knownHandlesChanged")
        let refused = h.error(g, ["type": "addKnownHandles", "child": "c1", "handles": phones([2, 3, 4])], .badRequest)
        XCTAssertTrue(refused["message"]?.string?.contains("c1 would keep 4 handles") ?? false, JSON.object(refused).text)
        XCTAssertTrue(h.events(c, "knownHandlesChanged").isEmpty, "none of them was added")
        XCTAssertEqual(h.ok(g, ["type": "addKnownHandles", "child": "c1", "handles": phones([2, 3, 3])])["known"]?.int, 3)
        let noAt: JSON = .array([.object(["value": "kim.example.org", "kind": "emailAddress"])])
        let invalid = h.error(g, ["type": "addKnownHandles", "child": "c1", "handles": noAt], .badRequest)["message"]?.string ?? ""
        XCTAssertTrue(invalid.contains("handles[0] is not a valid handle") && invalid.contains("an email address an @"), invalid)
        // Each says which handle, and what is wrong with it.
        for (handle, said) in [
            (JSON.object(["value": "", "kind": "phoneNumber"]), #"handles[0] is not a valid handle: "" is not a valid phoneNumber"#),
            (.object(["value": "x", "kind": "fax"]), #"handles[0] is not a valid handle: its kind "fax" is not phoneNumber"#),
            (.object(["value": "x"]), #"handles[0] is not a valid handle: it needs a string "value" and "kind""#),
        ] {
            let message = h.error(g, ["type": "addKnownHandles", "child": "c1", "handles": [handle]], .badRequest)["message"]?.string
            XCTAssertTrue(message?.contains(said) == true, message ?? "no message")
        }
        // An answer is never refused: an approval makes its handles known past the limit.
        let q = h.question(handles: ["+1 555 0109"])
        h.ok(c, ["type": "ask", "question": .object(q)])
        h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": "approve"])
        let known = h.ok(c, ["type": "knownHandles", "handles": phones([1, 2, 3, 9])])["known"]?.array
        XCTAssertEqual(known?.count, 4)
        _ = h.error(g, ["type": "addKnownHandles", "child": "c1", "handles": phones([5])], .badRequest)
        XCTAssertEqual(h.ok(g, ["type": "removeKnownHandles", "child": "c1", "handles": phones([1, 2])])["known"]?.int, 2)
        XCTAssertEqual(h.ok(g, ["type": "addKnownHandles", "child": "c1", "handles": phones([5])])["known"]?.int, 3)
    }

    func testKnownHandlesAreStoredInOrderOfBecomingKnownAndKeepTheirRows() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        _ = h.login("c1")
        var (g, _) = h.login("g1")
        func add(_ numbers: [Int]) {
            let handles = JSON.array(numbers.map { .object(["value": .string("+1 555 010\($0)"), "kind": "phoneNumber"]) })
            h.ok(g, ["type": "addKnownHandles", "child": "c1", "handles": handles])
        }
        func rows() -> [String: Int64] {
            Dictionary(uniqueKeysWithValues: h.core.snapshot().knownHandles.map { ($0.handle.value, $0.row) })
        }
        add([1, 2])
        add([2, 3])
        XCTAssertEqual(rows(), ["+15550101": 1, "+15550102": 2, "+15550103": 3], "known again, a handle keeps its row")
        try h.restart()
        (g, _) = h.login("g1")
        add([4])
        XCTAssertEqual(rows()["+15550104"], 4, "above every row loaded")
        h.assertStoreHoldsTheCoresState()
    }

    func testAChildThatAsksAndCancelsForeverStaysBounded() throws {
        let store = MemoryStore()
        let h = try CoreHarness(store: store, kept: QuestionsKept(count: 5))
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let pending = h.question()
        h.ok(c, ["type": "ask", "question": .object(pending)])
        var last = pending
        for _ in 0..<20 {
            last = h.question()
            h.ok(c, ["type": "ask", "question": .object(last)])
            h.ok(c, ["type": "cancel", "questionId": last["id"]!])
        }
        let kept = h.ok(c, ["type": "questions"])["questions"]!.array!
        XCTAssertEqual(kept.count, 5)
        XCTAssertTrue(kept.contains { $0["id"] == pending["id"] }, "pending questions are never forgotten")
        XCTAssertTrue(kept.contains { $0["id"] == last["id"] }, "the newest are kept")
        XCTAssertEqual(try store.questions(of: "c1", status: nil, newestFirst: true, after: nil, limit: 99).count, 5)
    }

    func testAChildsQuestionsWithLargeAvatarsStayWithinTheirSizeAcrossARestart() throws {
        let store = MemoryStore()
        let h = try CoreHarness(store: store, kept: QuestionsKept(bytes: 20_000))
        h.standardFamilies()
        var (c, _) = h.login("c1")
        let avatar = Data(repeating: 7, count: 3000).base64EncodedString()
        func large() -> JSONObject {
            var q = h.question()
            q["topic"] = .object([
                "kind": "communication",
                "personInformation": [
                    .object(["handle": .object(["value": "+1 555 0100", "kind": "phoneNumber"]), "avatarImage": .string(avatar)])
                ],
            ])
            return q
        }
        func stored() throws -> (count: Int, bytes: Int) {
            let questions = try store.questions(of: "c1", status: nil, newestFirst: true, after: nil, limit: 99)
            return (questions.count, questions.reduce(0) { $0 + $1.content.encoded.count })
        }
        let pending = large()
        h.ok(c, ["type": "ask", "question": .object(pending)])
        var last = pending
        for round in 0..<2 {
            for _ in 0..<20 {
                last = large()
                h.ok(c, ["type": "ask", "question": .object(last)])
                h.ok(c, ["type": "cancel", "questionId": last["id"]!])
            }
            let (count, bytes) = try stored()
            XCTAssertLessThanOrEqual(bytes, 20_000, "round \(round)")
            XCTAssertGreaterThan(count, 2, "round \(round): only as many are forgotten as the size needs")
            let kept = h.ok(c, ["type": "questions"])["questions"]!.array!
            XCTAssertTrue(kept.contains { $0["id"] == pending["id"] }, "pending questions are never forgotten")
            XCTAssertTrue(kept.contains { $0["id"] == last["id"] }, "the newest are kept")
            try h.restart()
            c = h.login("c1").0
        }
    }
}
