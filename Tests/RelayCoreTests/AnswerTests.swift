import RelayCore
import RelayProtocol
import XCTest

final class AnswerTests: XCTestCase {
    func testApproveDeliversResponseAndClosesForEveryGuardian() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1", subscribe: ["communication"])
        let (g1, _) = h.login("g1")
        let (g2, _) = h.login("g2")
        let q = h.question(handles: ["+1 (555) 0100", "+1 555 0101"])
        h.ok(c, ["type": "ask", "question": .object(q)])
        _ = h.drain(g1)
        _ = h.drain(g2)
        XCTAssertEqual(h.ok(g1, ["type": "answer", "questionId": q["id"]!, "choice": "approve"])["status"]?.string, "answered")
        let toChild = h.drain(c)
        XCTAssertEqual(toChild.map { $0["type"]?.string }, ["response", "knownHandlesChanged"])
        let resp = toChild.filter { $0["type"]?.string == "response" }
        XCTAssertEqual(resp.count, 1)
        XCTAssertEqual(resp[0]["choice"], .object(["id": "approve", "title": "Approve", "answer": "approval"]))
        XCTAssertEqual(resp[0]["guardian"]?.string, "g1")
        XCTAssertEqual(resp[0]["answeredAt"]?.string, h.now.rfc3339)
        XCTAssertEqual(resp[0]["question"]?["status"]?.string, "answered")
        // The event's question, spliced from stored bytes, is field for field (in order)
        // the question as the child's own list renders it.
        XCTAssertEqual(resp[0].fields.map(\.key), ["type", "seq", "question", "choice", "guardian", "answeredAt"])
        let listed = h.ok(c, ["type": "questions"])["questions"]?.array?.first
        XCTAssertEqual(resp[0]["question"], listed)
        XCTAssertEqual(
            resp[0]["question"]?.object?.fields.map(\.key),
            [
                "id", "topic", "choices", "defaultChoice", "expirationDate", "child", "createdAt", "status", "attempt", "outcome",
            ])
        for g in [g1, g2] {
            let closed = h.drain(g)
            XCTAssertEqual(closed.count, 1)
            XCTAssertEqual(closed[0]["reason"]?.string, "answered")
            XCTAssertEqual(closed[0]["by"]?.string, "g1")
            XCTAssertEqual(closed[0]["choice"], resp[0]["choice"], "what was decided, for the other guardians")
        }
        XCTAssertEqual(toChild[1]["added"]?.array?.count, 2, "an approval makes every handle known")
        let known = h.ok(c, ["type": "knownHandles", "handles": [.object(["value": "+15550100", "kind": "phoneNumber"])]])
        XCTAssertEqual(known["known"], [.object(["value": "+15550100", "kind": "phoneNumber"])])
    }

    func testApprovalsAddTheirActionsToTheHandlesTheyMakeKnown() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        func approve(_ handles: [String], actions: [String]) {
            let q = h.question(handles: handles, actions: actions)
            h.ok(c, ["type": "ask", "question": .object(q)])
            h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": "approve"])
        }
        approve(["+1 555 0100"], actions: ["message"])
        approve(["+1 555 0100", "+1 555 0101"], actions: ["call", "message"])
        approve(["+1 555 0102"], actions: ["call", "message"])
        let actions = Dictionary(uniqueKeysWithValues: h.core.snapshot().knownHandles.map { ($0.handle.value, $0.actions) })
        XCTAssertEqual(actions, ["+15550100": ["message", "call"], "+15550101": ["call", "message"], "+15550102": ["call", "message"]])
    }

    func testFirstAnswerWins() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g1, _) = h.login("g1")
        let (g2, _) = h.login("g2")
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        h.ok(g2, ["type": "answer", "questionId": q["id"]!, "choice": "decline"])
        let lost = h.error(g1, ["type": "answer", "questionId": q["id"]!, "choice": "approve"], .alreadyAnswered)
        XCTAssertEqual(lost["answeredBy"]?.string, "g2")
        XCTAssertEqual(lost["choice"]?["id"]?.string, "decline")
        XCTAssertEqual(lost["message"]?.string, "question \(q["id"]!.string!) was already answered by g2: Decline (denial)")
        h.ok(g2, ["type": "answer", "questionId": q["id"]!, "choice": "decline"])  // idempotent for the winner
        _ = h.error(g2, ["type": "answer", "questionId": q["id"]!, "choice": "approve"], .alreadyAnswered)
        XCTAssertTrue(h.events(c, "knownHandlesChanged").isEmpty, "a denial changes no known handle")
    }

    func testAnswerErrorsInContractOrder() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let (og, _) = h.login("og1")
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        _ = h.error(g, ["type": "answer", "questionId": .string(UUID().uuidString), "choice": "approve"], .notFound)
        _ = h.error(og, ["type": "answer", "questionId": q["id"]!, "choice": "approve"], .notFound)
        _ = h.error(g, ["type": "answer", "questionId": q["id"]!, "choice": "maybe"], .invalidChoice)
        _ = h.error(g, ["type": "answer", "questionId": q["id"]!], .badRequest)
        _ = h.error(og, ["type": "pending", "child": "c1"], .notFound)
        _ = h.error(og, ["type": "setLimits", "child": "c1", "enabled": false], .notFound)
        _ = h.error(og, ["type": "history", "child": "c1"], .notFound)
    }

    func testCustomChoicesAndTimedApproval() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1", subscribe: ["communication"])
        let (g, _) = h.login("g1")
        let choices: JSON = [
            .object(["id": "hour", "title": "For an hour", "answer": "approval", "durationSeconds": 3600]),
            .object(["id": "no", "title": "No", "answer": "denial"]),
        ]
        let q = h.question(handles: ["kim@example.org"].map { $0 }, choices: choices)
        var emailQ = q
        emailQ["topic"] = .object([
            "kind": "communication", "personInformation": [CoreHarness.person(" Kim@Example.org ", kind: "emailAddress")],
        ])
        h.ok(c, ["type": "ask", "question": .object(emailQ)])
        XCTAssertEqual(h.events(g, "question").first?["question"]?["defaultChoice"]?.string, "no")
        h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": "hour"])
        XCTAssertEqual(h.events(c, "response").first?["choice"]?["durationSeconds"]?.int, 3600)
        let handle: JSON = .object(["value": "kim@example.org", "kind": "emailAddress"])
        XCTAssertEqual(h.ok(c, ["type": "knownHandles", "handles": [handle]])["known"]?.array?.count, 1)
        h.advance(seconds: 3601)
        XCTAssertEqual(h.events(c, "knownHandlesChanged").first?["removed"], [handle])
        XCTAssertEqual(h.ok(c, ["type": "knownHandles", "handles": [handle]])["known"]?.array?.count, 0)
    }

    /// The handles one timed approval made known in one event lapse in one event too.
    func testHandlesApprovedTogetherLapseInOneEvent() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let q = h.question(
            handles: ["+1 555 0100", "+1 555 0101", "+1 555 0102"],
            choices: [
                .object(["id": "hour", "title": "For an hour", "answer": "approval", "durationSeconds": 3600]),
                .object(["id": "no", "title": "No", "answer": "denial"]),
            ])
        h.ok(c, ["type": "ask", "question": .object(q)])
        h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": "hour"])
        let handles: Set<String> = ["+15550100", "+15550101", "+15550102"]
        func values(_ list: JSON?) -> Set<String> { Set(list?.array?.compactMap { $0["value"]?.string } ?? []) }
        let added = h.events(c, "knownHandlesChanged")
        XCTAssertEqual(added.count, 1)
        XCTAssertEqual(values(added.first?["added"]), handles)
        h.advance(seconds: 3601)
        let lapsed = h.events(c, "knownHandlesChanged")
        XCTAssertEqual(lapsed.count, 1, "one event for the three handles")
        XCTAssertEqual(values(lapsed.first?["removed"]), handles)
        XCTAssertEqual(lapsed.first?["added"]?.array?.count, 0)
    }

    func testTimedApprovalOfAPermanentlyKnownHandleChangesNothing() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        h.ok(g, ["type": "addKnownHandles", "child": "c1", "handles": [.object(["value": "+1 555 0100", "kind": "phoneNumber"])]])
        _ = h.drain(c)
        let q = h.question(choices: [
            .object(["id": "min", "title": "A minute", "answer": "approval", "durationSeconds": 60]),
            .object(["id": "no", "title": "No", "answer": "denial"]),
        ])
        h.ok(c, ["type": "ask", "question": .object(q)])
        h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": "min"])
        let known = h.ok(c, ["type": "knownHandles", "handles": [.object(["value": "+15550100", "kind": "phoneNumber"])]])
        XCTAssertEqual(known["known"], [.object(["value": "+15550100", "kind": "phoneNumber"])])
        XCTAssertNil(known["timed"], "known for good: no end")
        h.advance(seconds: 120)
        XCTAssertTrue(h.events(c, "knownHandlesChanged").isEmpty)
    }

    /// A later timed approval extends a contact's time; an earlier-ending one neither
    /// shortens it nor announces anything.
    func testTimedApprovalsExtendButNeverShortenAKnownHandle() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let choices: JSON = [
            .object(["id": "min", "title": "A minute", "answer": "approval", "durationSeconds": 60]),
            .object(["id": "hour", "title": "An hour", "answer": "approval", "durationSeconds": 3600]),
            .object(["id": "two", "title": "Two hours", "answer": "approval", "durationSeconds": 7200]),
            .object(["id": "forever", "title": "For ever", "answer": "approval", "durationSeconds": .int(1 << 62)]),
            .object(["id": "no", "title": "No", "answer": "denial"]),
        ]
        let handle: JSON = .object(["value": "+15550100", "kind": "phoneNumber"])
        func approve(_ choice: String) {
            let q = h.question(expiresIn: nil, choices: choices)
            h.ok(c, ["type": "ask", "question": .object(q)])
            h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": .string(choice)])
        }
        func known() -> Int? { h.ok(c, ["type": "knownHandles", "handles": [handle]])["known"]?.array?.count }
        /// Until when the relay says the handle is known.
        func until() -> String? {
            let r = h.ok(c, ["type": "knownHandles", "handles": [handle]])
            XCTAssertEqual(r["known"], [handle], "the contract's shape")
            XCTAssertEqual(r["timed"]?.array?.count, 1)
            return r["timed"]?.array?.first?["until"]?.string
        }
        let start = h.now
        approve("hour")  // known until 3600
        XCTAssertEqual(h.events(c, "knownHandlesChanged").count, 1)
        XCTAssertEqual(until(), start.adding(seconds: 3600).rfc3339)
        h.advance(seconds: 10)
        approve("min")  // would end at 70: changes nothing
        XCTAssertTrue(h.events(c, "knownHandlesChanged").isEmpty)
        XCTAssertEqual(until(), start.adding(seconds: 3600).rfc3339, "the latest approval is not the one that ends last")
        h.advance(seconds: 190)
        XCTAssertEqual(known(), 1, "still known at 200")
        approve("two")  // until 7400
        XCTAssertTrue(h.events(c, "knownHandlesChanged").isEmpty, "it was known already")
        XCTAssertEqual(until(), start.adding(seconds: 7400).rfc3339)
        h.advance(seconds: 3500)
        XCTAssertEqual(known(), 1, "still known at 3700: the later approval extended it")
        XCTAssertTrue(h.events(c, "knownHandlesChanged").isEmpty)
        h.advance(seconds: 3701)
        XCTAssertEqual(h.events(c, "knownHandlesChanged").first?["removed"], [handle])
        XCTAssertEqual(known(), 0)
        approve("forever")  // beyond what a timestamp can be written at: until the last that can
        XCTAssertEqual(until(), "9999-12-31T23:59:59.999Z")
    }

    func testPendingAndHistory() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c1, _) = h.login("c1")
        let (c2, _) = h.login("c2")
        let (g, _) = h.login("g1")
        let a = h.question(), b = h.question()
        h.ok(c1, ["type": "ask", "question": .object(a)])
        h.advance(seconds: 1)
        h.ok(c2, ["type": "ask", "question": .object(b)])
        XCTAssertEqual(h.ok(g, ["type": "pending"])["questions"]?.array?.count, 2)
        XCTAssertEqual(h.ok(g, ["type": "pending", "child": "c2"])["questions"]?.array?.first?["id"], b["id"])
        h.ok(g, ["type": "answer", "questionId": a["id"]!, "choice": "approve"])
        let history = h.ok(g, ["type": "history"])["questions"]!.array!
        XCTAssertEqual(history.map { $0["id"] }, [b["id"], a["id"]], "newest first")
        XCTAssertEqual(history[1]["outcome"]?["guardian"]?.string, "g1")
        XCTAssertEqual(history[1]["outcome"]?["choice"]?["title"]?.string, "Approve")
        XCTAssertEqual(h.ok(g, ["type": "history", "limit": 1])["questions"]?.array?.count, 1)
        _ = h.error(g, ["type": "history", "limit": 0], .badRequest)
        _ = h.error(g, ["type": "history", "limit": .double(1.5)], .badRequest)
        // A limit too large for 64 bits is as good as none, as a seq past the head is the head.
        for huge in [JSON.double(1e19), .double(9e18), .int(.max)] {
            XCTAssertEqual(h.ok(g, ["type": "history", "limit": huge])["questions"]?.array?.count, 2, "\(huge)")
        }
    }

    func testLargeListsComeInPagesThatTogetherHoldEveryQuestionOnce() throws {
        let h = try CoreHarness { $0.listReplyBytes = 2000 }  // some four of these questions a page
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        var oldestFirst: [JSON] = []
        for i in 0..<10 {
            let q = h.question(handles: ["+1 555 01\(10 + i)"])
            h.ok(c, ["type": "ask", "question": .object(q)])
            oldestFirst.append(q["id"]!)
            if i % 3 == 2 { h.advance(seconds: 1) }  // three asked in each second: ties, in the order asked
        }
        /// Every page of `request`, followed through `next`.
        func pages(_ conn: ConnectionID, _ request: JSONObject) -> [[JSON]] {
            var request = request
            var out: [[JSON]] = []
            while true {
                let r = h.ok(conn, request)
                out.append(r["questions"]?.array ?? [])
                guard r["more"]?.bool == true, let next = r["next"] else {
                    XCTAssertNil(r["next"], "next only with more")
                    return out
                }
                request["after"] = next
            }
        }
        let pending = pages(g, ["type": "pending"])
        XCTAssertGreaterThan(pending.count, 1, "the list does not fit in one reply")
        XCTAssertTrue(pending.allSatisfy { $0.count <= 5 }, "\(pending.map(\.count))")
        XCTAssertEqual(pending.flatMap { $0.map { $0["id"]! } }, oldestFirst, "oldest first, each once")
        XCTAssertEqual(pages(c, ["type": "questions"]).flatMap { $0.map { $0["id"]! } }, oldestFirst.reversed())
        XCTAssertEqual(pages(g, ["type": "history"]).flatMap { $0.map { $0["id"]! } }, oldestFirst.reversed())
        let first = h.ok(g, ["type": "history", "limit": 2])
        XCTAssertEqual(first["questions"]?.array?.map { $0["id"]! }, Array(oldestFirst.reversed().prefix(2)))
        XCTAssertEqual(first["more"], true, "the history goes on past the limit")
        let onePerPage = try CoreHarness { $0.listReplyBytes = 1 }
        onePerPage.standardFamilies()
        let (c2, _) = onePerPage.login("c1")
        for _ in 0..<2 { onePerPage.ok(c2, ["type": "ask", "question": .object(onePerPage.question())]) }
        XCTAssertEqual(onePerPage.ok(c2, ["type": "questions"])["questions"]?.array?.count, 1, "a page holds one at least")
        _ = h.error(g, ["type": "pending", "after": "yesterday"], .badRequest)
    }

    func testKnownHandleChangesByGuardians() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let phone: JSON = .object(["value": "+1 555 0100", "kind": "phoneNumber"])
        XCTAssertEqual(h.ok(g, ["type": "addKnownHandles", "child": "c1", "handles": [phone]])["known"]?.int, 1)
        XCTAssertEqual(h.events(c, "knownHandlesChanged").count, 1)
        h.ok(g, ["type": "addKnownHandles", "child": "c1", "handles": [phone]])
        XCTAssertTrue(h.events(c, "knownHandlesChanged").isEmpty, "only when the set really changes")
        let other: JSON = .object(["value": "x", "kind": "custom"])
        XCTAssertEqual(h.ok(g, ["type": "removeKnownHandles", "child": "c1", "handles": [other]])["known"]?.int, 1)
        XCTAssertTrue(h.events(c, "knownHandlesChanged").isEmpty)
        XCTAssertEqual(h.ok(g, ["type": "removeKnownHandles", "child": "c1", "handles": [phone]])["known"]?.int, 0)
        XCTAssertEqual(h.events(c, "knownHandlesChanged").first?["removed"]?.array?.count, 1)
        _ = h.error(g, ["type": "addKnownHandles", "child": "c1", "handles": [.object(["value": "", "kind": "custom"])]], .badRequest)
        _ = h.error(g, ["type": "addKnownHandles", "child": "oc1", "handles": [phone]], .notFound)
        _ = h.error(c, ["type": "knownHandles", "handles": "x"], .badRequest)
    }

    /// Custom values are compared exactly (§5): the same text in another Unicode form is
    /// another handle.
    func testCustomHandlesAreComparedByTheirExactText() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let composed: JSON = .object(["value": "Caf\u{E9}", "kind": "custom"])
        let decomposed: JSON = .object(["value": "Cafe\u{301}", "kind": "custom"])
        XCTAssertEqual(h.ok(g, ["type": "addKnownHandles", "child": "c1", "handles": [composed]])["known"]?.int, 1)
        XCTAssertEqual(h.ok(c, ["type": "knownHandles", "handles": [decomposed]])["known"]?.array, [])
        let known = h.ok(c, ["type": "knownHandles", "handles": [composed, decomposed]])["known"]?.array ?? []
        XCTAssertEqual(known.map { Array(($0["value"]?.string ?? "").utf8) }, [Array("Caf\u{E9}".utf8)], "by its bytes")
        XCTAssertEqual(h.ok(g, ["type": "addKnownHandles", "child": "c1", "handles": [decomposed]])["known"]?.int, 2)
    }
}
