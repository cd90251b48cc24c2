@testable import RelayCore
import RelayProtocol
import RelayModel
import RelayStore
import XCTest

final class AskTests: XCTestCase {
    func testAskForwardsToEveryGuardianOfTheFamilyOnly() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g1, _) = h.login("g1")
        let (g2, _) = h.login("g2")
        let (og, _) = h.login("og1")
        let q = h.question(id: UUID().uuidString.lowercased())
        let r = h.ok(c, ["type": "ask", "question": .object(q)])
        XCTAssertEqual(r["questionId"]?.string, q["id"]!.string!.uppercased())
        XCTAssertEqual(r["status"]?.string, "pending")
        XCTAssertEqual(r["attempt"]?.int, 1)
        for g in [g1, g2] {
            let ev = h.events(g, "question")
            XCTAssertEqual(ev.count, 1)
            XCTAssertEqual(ev[0]["seq"]?.int, 1)
            XCTAssertEqual(ev[0]["question"]?["child"]?.string, "c1")
            XCTAssertEqual(ev[0]["question"]?["createdAt"]?.string, h.now.rfc3339)
            XCTAssertEqual(ev[0]["question"]?["defaultChoice"]?.string, "decline", "the most restrictive by default")
            XCTAssertEqual(ev[0].fields.map(\.key), ["type", "seq", "question"])
            XCTAssertEqual(ev[0]["question"], h.ok(g, ["type": "pending"])["questions"]?.array?.first, "as the pending list renders it")
        }
        XCTAssertTrue(h.drain(og).isEmpty, "nothing reaches another family")
    }

    /// The same question, written in the canonical order (read straight from the frame's
    /// bytes) and in another order (parsed, then validated), is filed and forwarded alike.
    func testAQuestionReadDirectlyIsFiledAsParsedAndValidated() throws {
        var outcomes: [[JSON]] = []
        for reordered in [false, true] {
            let h = try CoreHarness()
            h.standardFamilies()
            let (c, _) = h.login("c1")
            let (g, _) = h.login("g1")
            var q = h.question(id: "6f9619ff-8b86-d011-b42d-00cf4fc964ff", handles: ["+1 555 0100", "+1 555 0101"])
            if reordered { q = JSONObject(q.fields.reversed()) }
            let ask: JSONObject = ["type": "ask", "id": "a1", "question": .object(q)]
            let body = ask.encoded
            XCTAssertEqual(QuestionContent.readAsk(body, now: h.now) == nil, reordered)
            h.sendRaw(c, body)
            let reply = try XCTUnwrap(h.drain(c).first { $0["re"]?.string == "a1" })
            XCTAssertEqual(reply["type"]?.string, "ok")
            let resent = h.request(c, ["type": "ask", "question": .object(q)])
            outcomes.append([
                .object(reply), .object(h.events(g, "question")[0]), h.ok(g, ["type": "pending"])["questions"] ?? .null,
                .object(resent),
            ])
        }
        XCTAssertEqual(outcomes[0].map(\.text), outcomes[1].map(\.text))
    }

    func testAskIsIdempotentByID() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        var changed = q
        changed["topic"] = .object(["kind": "significantAppUpdate", "description": "other"])
        let again = h.ok(c, ["type": "ask", "question": .object(changed)])
        XCTAssertEqual(again["attempt"]?.int, 1)
        XCTAssertEqual(h.events(g, "question").count, 1, "a resend forwards nothing new")
        h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": "approve"])
        h.advance(seconds: 7200)  // past the expirationDate: a resend still never fails
        let answered = h.ok(c, ["type": "ask", "question": .object(q)])
        XCTAssertEqual(answered["status"]?.string, "answered")
        XCTAssertEqual(answered["response"]?["guardian"]?.string, "g1")
        XCTAssertEqual(answered["response"]?["choice"]?["id"]?.string, "approve")
    }

    func testValidation() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        _ = h.error(c, ["type": "ask"], .badRequest)
        _ = h.error(c, ["type": "ask", "question": "x"], .badRequest)
        var invalid: [JSONObject] = []
        var q = h.question(); q["id"] = "not-a-uuid"; invalid.append(q)
        q = h.question(handles: []); invalid.append(q)
        q = h.question(handles: (0..<65).map { "+1 555 \($0)" }); invalid.append(q)
        q = h.question(handles: ["()"]); invalid.append(q)
        q = h.question();
        q["topic"] = .object(["kind": "communication", "personInformation": [CoreHarness.person("kim", kind: "emailAddress")]]);
        invalid.append(q)
        q = h.question(); q["topic"] = .object(["kind": "communication", "personInformation": [CoreHarness.person("", kind: "custom")]]);
        invalid.append(q)
        q = h.question();
        q["topic"] = .object(["kind": "communication", "personInformation": [CoreHarness.person("+1 2")], "actions": ["dance"]]);
        invalid.append(q)
        q = h.question(); q["topic"] = .object(["kind": "significantAppUpdate", "description": ""]); invalid.append(q)
        q = h.question(); q["topic"] = .object(["kind": "weather"]); invalid.append(q)
        q = h.question(choices: []); invalid.append(q)
        q = h.question(choices: [.object(["id": "yes", "title": "Yes", "answer": "approval"])]); invalid.append(q)
        q = h.question(choices: [
            .object(["id": "a", "title": "A", "answer": "approval"]), .object(["id": "a", "title": "B", "answer": "denial"]),
        ]); invalid.append(q)
        q = h.question(defaultChoice: "maybe"); invalid.append(q)
        q = h.question(expiresIn: -1); invalid.append(q)
        q = h.question(); q["expirationDate"] = "tomorrow"; invalid.append(q)
        q = h.question()
        q["topic"] = .object([
            "kind": "communication",
            "personInformation": [.object(["handle": .object(["value": "+1 2", "kind": "phoneNumber"]), "avatarImage": "%%%"])],
        ])
        invalid.append(q)
        for bad in invalid {
            let r = h.error(c, ["type": "ask", "question": .object(bad)], .invalidQuestion)
            XCTAssertNotNil(r["message"])
        }
        // A timed approval lasts a second at least, and the refusal says so.
        func timed(_ seconds: JSON) -> JSONObject {
            h.question(choices: [
                .object(["id": "t", "title": "T", "answer": "approval", "durationSeconds": seconds]),
                .object(["id": "no", "title": "No", "answer": "denial"]),
            ])
        }
        for seconds: JSON in [0, -5, .double(1.5), .double(-1e19)] {
            let r = h.error(c, ["type": "ask", "question": .object(timed(seconds))], .invalidQuestion)
            XCTAssertEqual(r["message"]?.string, "choices[0].durationSeconds must be a whole number of seconds, at least 1")
        }
        XCTAssertTrue(h.events(g, "question").isEmpty, "rejected questions leave nothing behind")
        XCTAssertEqual(h.ok(g, ["type": "pending"])["questions"]?.array?.count, 0)
        // Boundaries that are accepted.
        h.ok(c, ["type": "ask", "question": .object(h.question(handles: (0..<64).map { "+1 555 \($0)" }))])
        h.ok(c, ["type": "ask", "question": .object(timed(.int(1 << 53)))])
        h.ok(c, ["type": "ask", "question": .object(timed(.double(1e19)))])  // whole, past Int64: as long as any
        // Ids are compared code point for code point, as handles are: "café" written two ways
        // is two ids, and an answer names the one it names.
        let accented = h.question(choices: [
            .object(["id": "caf\u{E9}", "title": "Precomposed", "answer": "approval"]),
            .object(["id": "cafe\u{301}", "title": "Combining", "answer": "denial"]),
        ])
        h.ok(c, ["type": "ask", "question": .object(accented)])
        h.ok(g, ["type": "answer", "questionId": accented["id"]!, "choice": "cafe\u{301}"])
        let closed = h.events(g, "questionClosed").last { $0["questionId"] == accented["id"] }
        XCTAssertEqual(closed?["choice"]?["title"]?.string, "Combining")
        var offset = h.question()
        offset["expirationDate"] = "2026-12-01T12:00:00+01:00"
        h.ok(c, ["type": "ask", "question": .object(offset)])
        XCTAssertEqual(h.events(g, "question").last?["question"]?["expirationDate"]?.string, "2026-12-01T11:00:00Z")
    }

    func testQuestionIDOfAnotherChildIsInvalid() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c1, _) = h.login("c1")
        let (c2, _) = h.login("c2")
        let q = h.question()
        h.ok(c1, ["type": "ask", "question": .object(q)])
        _ = h.error(c2, ["type": "ask", "question": .object(q)], .invalidQuestion)
    }

    func testLimitsOffAndNoGuardian() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let a = h.admin()
        h.ok(a, ["type": "createFamily", "family": "lonely"])
        let r = h.ok(a, ["type": "addMember", "family": "lonely", "member": "solo", "role": "child"])
        h.tokens["solo"] = r["token"]?.string
        let (solo, _) = h.login("solo")
        let noGuardian = h.error(solo, ["type": "ask", "question": .object(h.question())], .contactSyncNotSetup)
        XCTAssertEqual(
            noGuardian["message"]?.string,
            "the family lonely has no guardian to ask; its relay's admin adds one with `permission-relay member add lonely NAME --role guardian`"
        )
        _ = h.error(solo, ["type": "ask", "question": .object(h.updateQuestion())], .contactSyncNotSetup)

        let (c, _) = h.login("c1")
        h.ok(a, ["type": "setLimits", "child": "c1", "enabled": false])
        XCTAssertEqual(h.events(c, "limitsChanged").first?["enabled"]?.bool, false)
        _ = h.error(c, ["type": "ask", "question": .object(h.question())], .communicationLimitsNotEnabled)
        h.ok(c, ["type": "ask", "question": .object(h.updateQuestion())])
        XCTAssertEqual(h.ok(c, ["type": "limits"])["enabled"]?.bool, false)
    }

    /// A child's pending questions are held in memory: past their size limit, an ask is
    /// refused until some are answered or cancelled.
    func testPendingQuestionsAreBoundedInSize() throws {
        let h = try CoreHarness { $0.maxPendingBytesPerChild = 1000 }
        h.standardFamilies()
        let (c, _) = h.login("c1")
        var asked: [String] = []
        var refused: JSONObject?
        while refused == nil && asked.count < 20 {
            let id = UUID().uuidString
            let r = h.request(c, ["type": "ask", "question": .object(h.question(id: id))])
            if r["type"]?.string == "ok" { asked.append(id) } else { refused = r }
        }
        XCTAssertEqual(refused?["code"]?.string, "tooManyPending", "\(asked.count) asks")
        XCTAssertTrue(refused?["message"]?.string?.contains("c1's pending questions take") == true)
        XCTAssertGreaterThan(asked.count, 1)
        h.ok(c, ["type": "cancel", "questionId": .string(asked[0])])
        let last = h.question()
        h.ok(c, ["type": "ask", "question": .object(last)])
        // Counted as they end, however they end: none left, no bytes left.
        let (g, _) = h.login("g1")
        h.ok(g, ["type": "answer", "questionId": .string(asked[1]), "choice": "approve"])
        for id in asked.dropFirst(2) + [last["id"]!.string!] { h.ok(c, ["type": "cancel", "questionId": .string(id)]) }
        let child = try XCTUnwrap(h.core.members["c1"])
        XCTAssertEqual(child.pendingQuestions, 0)
        XCTAssertEqual(child.pendingBytes, 0)
    }

    /// Wire contract §7: with its default settings a relay accepts at least 64 pending
    /// questions per child, however large the frames that carry them, though what is
    /// held of each (defaults and null avatars filled in) outgrows its frame.
    func testSixtyFourOfTheLargestQuestionsAreAcceptedByDefault() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let limit = CoreConfig().maxFrameBytes
        for n in 0..<64 {
            // 64 people with neither avatar nor names, no actions, choices or default: the
            // most a question's validation fills in; a name pads the frame to the limit.
            let id = UUID().uuidString
            func ask(padding: Int) -> [UInt8] {
                let people: [JSON] = (0..<64).map { p in
                    var person: JSONObject = ["handle": .object(["value": .string("k\(p)"), "kind": "custom"])]
                    if p == 0 { person["nameComponents"] = .object(["givenName": .string(String(repeating: "a", count: padding))]) }
                    return .object(person)
                }
                let question: JSONObject = [
                    "id": .string(id), "topic": .object(["kind": "communication", "personInformation": .array(people)]),
                ]
                return (["type": "ask", "id": .string("a\(n)"), "question": .object(question)] as JSONObject).encoded
            }
            let body = ask(padding: limit - ask(padding: 0).count)
            XCTAssertEqual(body.count, limit)
            h.sendRaw(c, body)
            let reply = try XCTUnwrap(h.inbox[c]?.last { $0["re"]?.string == "a\(n)" })
            XCTAssertEqual(reply["type"]?.string, "ok", "ask \(n + 1): \(reply["message"]?.string ?? "")")
        }
        XCTAssertGreaterThan(try XCTUnwrap(h.core.members["c1"]).pendingBytes, 64 * limit)
    }

    func testTooManyPendingAndRateLimit() throws {
        let h = try CoreHarness {
            $0.maxPendingPerChild = 2; $0.askRateLimit = 1
        }
        h.standardFamilies()
        let (c, _) = h.login("c1")
        h.ok(c, ["type": "ask", "question": .object(h.question())])
        h.ok(c, ["type": "ask", "question": .object(h.question())])
        _ = h.error(c, ["type": "ask", "question": .object(h.question())], .tooManyPending)
        let (c2, _) = h.login("c2")
        h.ok(c2, ["type": "ask", "question": .object(h.question())])
        h.ok(c2, ["type": "ask", "question": .object(h.question())])
        let (g, _) = h.login("g1")
        for q in h.ok(g, ["type": "pending", "child": "c2"])["questions"]!.array! {
            h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": "decline"])
        }
        _ = h.error(c2, ["type": "ask", "question": .object(h.question())], .rateLimited)
        h.advance(seconds: 1)
        h.ok(c2, ["type": "ask", "question": .object(h.question())])
    }

    /// With the default limits a child may ask the 64 questions every relay accepts in one
    /// burst (wire contract §7), and the one after them is told the rate.
    func testDefaultRateLetsAChildFillSixtyFourPendingAtOnce() throws {
        let h = try CoreHarness { $0.askRateLimit = CoreConfig().askRateLimit }
        h.standardFamilies()
        let (c, _) = h.login("c1")
        for _ in 0..<64 { h.ok(c, ["type": "ask", "question": .object(h.question())]) }
        let refused = h.error(c, ["type": "ask", "question": .object(h.question())], .rateLimited)
        XCTAssertEqual(refused["message"]?.string, "too many asks: at most 32 per second, in bursts of 64; try again shortly")
    }

    func testAllKnown() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        h.ok(g, ["type": "addKnownHandles", "child": "c1", "handles": [.object(["value": "+1 (555) 0100", "kind": "phoneNumber"])]])
        let known = h.question(handles: ["+15550100"])
        let first = h.ok(c, ["type": "ask", "question": .object(known)])
        XCTAssertEqual(first["allKnown"]?.bool, true)
        var resent = h.ok(c, ["type": "ask", "question": .object(known)])
        resent["re"] = first["re"]
        XCTAssertEqual(resent, first, "a resend of a pending question gets the same ok (§7)")
        XCTAssertNil(h.ok(c, ["type": "ask", "question": .object(h.question(handles: ["+15550100", "+1 555 0199"]))])["allKnown"])
    }

    func testCancelAndReask() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1", subscribe: ["communication"])
        let (other, _) = h.login("c1", session: "tablet", subscribe: ["communication"])
        let (g, _) = h.login("g1")
        let q = h.question()
        let id = q["id"]!
        h.ok(c, ["type": "ask", "question": .object(q)])
        XCTAssertEqual(h.ok(c, ["type": "cancel", "questionId": id])["status"]?.string, "cancelled")
        XCTAssertEqual(h.events(other, "questionClosed").first?["reason"]?.string, "cancelled")
        XCTAssertEqual(h.events(c, "questionClosed").count, 1, "the asking session hears of it too")
        let closed = h.events(g, "questionClosed")
        XCTAssertEqual(closed.first?["child"]?.string, "c1")
        h.ok(c, ["type": "cancel", "questionId": id])
        XCTAssertTrue(h.events(g, "questionClosed").isEmpty, "a repeated cancel appends nothing")
        _ = h.error(g, ["type": "answer", "questionId": id, "choice": "approve"], .cancelled)

        // A client's own resend of the ask (its reply lost with a connection) opens nothing.
        let resent = h.ok(c, ["type": "ask", "question": .object(q), "resend": true])
        XCTAssertEqual(resent["status"]?.string, "cancelled")
        XCTAssertEqual(resent["attempt"]?.int, 1)
        XCTAssertTrue(h.events(g, "question").isEmpty, "the guardians are not asked again")

        let again = h.ok(c, ["type": "ask", "question": .object(q)])
        XCTAssertEqual(again["attempt"]?.int, 2)
        XCTAssertEqual(h.events(g, "question").first?["question"]?["attempt"]?.int, 2)
        h.ok(g, ["type": "answer", "questionId": id, "choice": "approve"])
        _ = h.error(c, ["type": "cancel", "questionId": id], .alreadyAnswered)
        let (c2, _) = h.login("c2")
        _ = h.error(c2, ["type": "cancel", "questionId": id], .notFound)
    }

    /// Each question asked for the first time gets the next row for the store, kept when it
    /// is asked again; rows are never given twice, across restarts and forgotten questions.
    func testEveryQuestionGetsARowOfItsOwnThatItKeeps() throws {
        let store = MemoryStore()
        let h = try CoreHarness(store: store, kept: QuestionsKept(count: 2))
        h.standardFamilies()
        var (c, _) = h.login("c1")
        var (g, _) = h.login("g1")
        func rows() throws -> [String: Int64] {
            let stored = try store.questions(of: "c1", status: nil, newestFirst: true, after: nil, limit: 99)
            return Dictionary(uniqueKeysWithValues: stored.map { ($0.id, $0.row) })
        }
        let (a, b, third): (JSONObject, JSONObject, JSONObject) = (h.question(), h.question(), h.question())
        let (idA, idB, idThird) = (a["id"]!.string!, b["id"]!.string!, third["id"]!.string!)
        for q in [a, b] { h.ok(c, ["type": "ask", "question": .object(q)]) }
        h.ok(c, ["type": "cancel", "questionId": .string(idA)])
        h.ok(c, ["type": "ask", "question": .object(a)])  // asked again: the same question, the same row
        XCTAssertEqual(try rows(), [idA: 1, idB: 2])

        h.ok(g, ["type": "answer", "questionId": .string(idA), "choice": "approve"])
        h.ok(c, ["type": "ask", "question": .object(third)])  // the child's oldest finished one is forgotten
        XCTAssertEqual(try rows(), [idB: 2, idThird: 3])

        try h.restart()
        (c, _) = h.login("c1")
        (g, _) = h.login("g1")
        h.ok(g, ["type": "answer", "questionId": .string(idThird), "choice": "decline"])
        h.ok(c, ["type": "ask", "question": .object(a)])  // forgotten, so new: a row after every row given
        XCTAssertEqual(try rows(), [idB: 2, idA: 4])
    }

    func testQuestionsListAndFilter() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let a = h.question(), b = h.question()
        h.ok(c, ["type": "ask", "question": .object(a)])
        h.advance(seconds: 1)
        h.ok(c, ["type": "ask", "question": .object(b)])
        h.ok(c, ["type": "cancel", "questionId": a["id"]!])
        let all = h.ok(c, ["type": "questions"])["questions"]!.array!
        XCTAssertEqual(all.compactMap { $0["id"]?.string }, [b["id"]!.string!, a["id"]!.string!])
        let pending = h.ok(c, ["type": "questions", "status": "pending"])["questions"]!.array!
        XCTAssertEqual(pending.compactMap { $0["id"]?.string }, [b["id"]!.string!])
        _ = h.error(c, ["type": "questions", "status": "weird"], .badRequest)
    }
}
