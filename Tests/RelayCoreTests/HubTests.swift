// A relay linked to a family hub: questions go out as they are asked, decisions are
// proposed and take effect only as the hub hands them back, the first one winning,
// and questions asked on other devices reach this relay's guardians.

import Foundation
@testable import RelayCore
import RelayModel
import RelayProtocol
import RelayStore
import XCTest

final class HubTests: XCTestCase {
    private func linked() throws -> CoreHarness {
        let h = try CoreHarness { $0.hubDevice = "laptop" }
        h.standardFamilies()
        return h
    }

    /// A linked relay where c1 has asked a question: g1's and c1's connections, and its id.
    private func asked(expiresIn: Double? = 3600) throws -> (CoreHarness, ConnectionID, ConnectionID, String) {
        let h = try linked()
        let (g, _) = h.login("g1")
        let (c, _) = h.login("c1", subscribe: ["communication"])
        let q = h.question(expiresIn: expiresIn)
        h.ok(c, ["type": "ask", "question": .object(q)])
        return (h, g, c, q["id"]!.string!.uppercased())
    }

    /// `q` asking about another handle: another version of the same question id.
    private func version(of q: JSONObject, asking handle: String) -> JSONObject {
        var other = q
        other["topic"] = .object([
            "kind": "communication", "personInformation": [CoreHarness.person(handle)], "actions": ["message"],
        ])
        return other
    }

    /// A message as another device's relay would have sent it.
    private func message(_ subject: String, _ body: JSONObject) -> HubOutbound {
        HubOutbound(id: 0, family: "fam", subject: subject, messageID: "", body: body.encoded, firstOnSubject: false)
    }

    func testFamilyLinkSaysWhetherTheHubIsReachableAndWhatWaitsForIt() throws {
        let (h, g, c, _) = try asked()
        XCTAssertEqual(h.ok(c, ["type": "familyLink"])["connected"]?.bool, false, "no word from the hub yet")
        XCTAssertEqual(h.ok(g, ["type": "familyLink"])["waiting"]?.int, 1, "the question waits in the outbox")
        let a = h.admin()
        XCTAssertEqual(h.ok(a, ["type": "status"])["hub"]?["inbox"], .null, "not looked at yet")
        h.core.hubLink = (true, h.now, 2)
        XCTAssertEqual(h.ok(a, ["type": "status"])["hub"]?["inbox"]?.int, 2, "what the hub holds for this device")
        let up = h.ok(g, ["type": "familyLink"])
        XCTAssertEqual(up["linked"]?.bool, true)
        XCTAssertEqual(up["connected"]?.bool, true)
        XCTAssertEqual(up["lastContact"]?.string, h.now.rfc3339)
        h.core.hubSent(h.hubOutbox[0].id)
        XCTAssertEqual(h.ok(c, ["type": "familyLink"])["waiting"]?.int, 1, "an asking waits until it is back from the hub")
        h.fromHub(h.hubOutbox[0])
        XCTAssertEqual(h.ok(c, ["type": "familyLink"])["waiting"]?.int, 0)
        XCTAssertEqual(up["trusted"]?.bool, true)
        h.core.hubRefused = true  // the device was removed
        XCTAssertEqual(h.ok(c, ["type": "familyLink"])["trusted"]?.bool, false)

        let alone = try CoreHarness()
        alone.standardFamilies()
        let (child, _) = alone.login("c1")
        XCTAssertEqual(alone.ok(child, ["type": "familyLink"])["linked"]?.bool, false, "a family on one relay")
    }

    func testAQuestionGoesToTheHubAndAnAnswerWaitsForTheHubsDecision() throws {
        let (h, g, c, id) = try asked()
        let asking = "1-\(h.now.milliseconds)"
        XCTAssertEqual(h.hubOutbox.map(\.subject), ["fam.fam.ask.\(id)"])
        XCTAssertEqual(h.hubOutbox.first?.messageID, "\(id)#\(asking)")
        _ = h.events(g, "question")
        // The answer is proposed, not applied: no reply, no response yet.
        h.send(g, ["type": "answer", "id": "a1", "questionId": .string(id), "choice": "approve"])
        XCTAssertTrue(h.drain(g).isEmpty)
        XCTAssertTrue(h.events(c, "response").isEmpty)
        let decision = try XCTUnwrap(h.hubOutbox.last)
        XCTAssertEqual(decision.subject, "fam.fam.dec.\(id).\(asking)")
        XCTAssertTrue(decision.firstOnSubject)
        XCTAssertEqual(decision.messageID, "\(id)#\(asking):answer:g1:approve")
        // A resend proposes nothing more; both wait.
        h.send(g, ["type": "answer", "id": "a2", "questionId": .string(id), "choice": "approve"])
        XCTAssertEqual(h.hubOutbox.count, 2)
        // Back from the hub (first on its subject): it takes effect, and the requests are answered.
        XCTAssertEqual(h.fromHub(h.hubOutbox[0]), .known, "the question's own message coming back")
        XCTAssertEqual(h.fromHub(decision), .applied)
        let replies = h.drain(g)
        XCTAssertEqual(replies.filter { $0["type"]?.string == "ok" }.compactMap { $0["re"]?.string }, ["a1", "a2"])
        XCTAssertEqual(replies.filter { $0["type"]?.string == "questionClosed" }.count, 1)
        XCTAssertEqual(h.events(c, "response").first?["choice"]?["id"]?.string, "approve")
        XCTAssertEqual(h.fromHub(decision), .known, "a redelivery changes nothing")
        XCTAssertTrue(h.drain(c).isEmpty)
        for m in h.hubOutbox { h.core.hubSent(m.id) }
        h.pump()
        XCTAssertEqual(h.hubOutbox, [], "what the hub stored leaves the outbox")
    }

    /// While the hub is out of reach, a connection's requests waiting for its decisions are
    /// bounded: one more is told `busy`; once they are answered, more may wait again.
    func testAConnectionsRequestsWaitingForTheHubAreBounded() throws {
        let (h, g, _, id) = try asked()
        _ = h.events(g, "question")
        let waiting = RelayCore.hubWaitingPerConnection
        for i in 0..<waiting {
            h.send(g, ["type": "answer", "id": .string("a\(i)"), "questionId": .string(id), "choice": "approve"])
        }
        XCTAssertTrue(h.drain(g).isEmpty, "all wait")
        let refused = h.error(g, ["type": "answer", "id": "more", "questionId": .string(id), "choice": "approve"], .busy)
        XCTAssertTrue(refused["message"]?.string?.contains("\(waiting) requests of this connection already wait") ?? false)
        let (other, _) = h.login("g1")
        h.send(other, ["type": "answer", "id": "b", "questionId": .string(id), "choice": "approve"])
        XCTAssertTrue(h.drain(other).isEmpty, "another connection's wait")
        // A connection that goes away takes its waiting requests with it, and only those.
        let (leaving, _) = h.login("g1")
        h.send(leaving, ["type": "answer", "id": "l", "questionId": .string(id), "choice": "approve"])
        let (idle, _) = h.login("g1")
        h.core.disconnected(idle)
        XCTAssertEqual(h.core.hubWaiters.values.joined().count, waiting + 2)
        h.core.disconnected(leaving)
        XCTAssertEqual(h.core.hubWaiters.values.joined().count, waiting + 1)
        XCTAssertEqual(h.fromHub(h.hubOutbox[0]), .known)
        XCTAssertEqual(h.fromHub(try XCTUnwrap(h.hubOutbox.last)), .applied)
        XCTAssertEqual(h.drain(g).filter { $0["type"]?.string == "ok" }.count, waiting)
        XCTAssertEqual(h.drain(other).filter { $0["type"]?.string == "ok" }.compactMap { $0["re"]?.string }, ["b"])
        h.ok(g, ["type": "answer", "questionId": .string(id), "choice": "approve"])  // decided: answered at once
        // Answered, they no longer count: the connection's next proposal waits, not refused.
        let (c, _) = h.login("c1")
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        h.send(g, ["type": "answer", "id": "next", "questionId": q["id"]!, "choice": "approve"])
        XCTAssertEqual(h.drain(g).filter { $0["type"]?.string != "question" }, [], "it waits for the hub")
    }

    func testAnotherDevicesDecisionFirstOnTheHubWinsOverTheOneProposedHere() throws {
        let (h, g, c, id) = try asked()
        h.send(g, ["type": "answer", "id": "a1", "questionId": .string(id), "choice": "approve"])
        h.send(c, ["type": "cancel", "id": "x1", "questionId": .string(id)])
        let asking = "\(id)#1-\(h.now.milliseconds)"
        XCTAssertEqual(h.hubOutbox.map(\.messageID), [asking, "\(asking):answer:g1:approve", "\(asking):cancel"])
        h.fromHub(h.hubOutbox[0])  // the asking back first, as the hub hands its stream
        // A guardian on the desktop declined first.
        h.fromHub(message("fam.fam.dec.\(id).1-\(h.now.milliseconds)", ["kind": "answer", "member": "g9", "choice": "decline", "at": 1]))
        let lost = h.drain(g).first { $0["re"]?.string == "a1" }
        XCTAssertEqual(lost?["code"]?.string, "alreadyAnswered")
        XCTAssertEqual(lost?["answeredBy"]?.string, "g9")
        let child = h.drain(c)
        XCTAssertEqual(child.first { $0["re"]?.string == "x1" }?["code"]?.string, "alreadyAnswered")
        XCTAssertEqual(child.first { $0["type"]?.string == "response" }?["guardian"]?.string, "g9")
    }

    func testAQuestionAskedOnAnotherDeviceReachesTheGuardiansHereOnceEachAsking() throws {
        let h = try linked()
        let (g, _) = h.login("g1")
        let q = h.question()
        let id = q["id"]!.string!.uppercased()
        // As the tablet's relay sends it: the question in its canonical form.
        let canonical = try JSON.parse(QuestionContent.validate(q, now: h.now).encoded)
        let asked = message(
            "fam.fam.ask.\(id)",
            ["child": "c1", "attempt": 1, "createdAt": .int(h.now.milliseconds), "question": canonical, "device": "tablet"])
        XCTAssertEqual(h.fromHub(asked), .applied)
        XCTAssertEqual(h.events(g, "question").first?["question"]?["id"]?.string, id)
        XCTAssertEqual(h.fromHub(asked), .known, "a redelivery asks nobody twice")
        XCTAssertTrue(h.drain(g).isEmpty)
        XCTAssertEqual(h.hubOutbox, [], "nothing to send back: the tablet told the hub")
        // Cancelled on the tablet, then asked again there.
        h.fromHub(message("fam.fam.dec.\(id).1-\(h.now.milliseconds)", ["kind": "cancel", "member": "c1", "at": 2]))
        XCTAssertEqual(h.events(g, "questionClosed").first?["reason"]?.string, "cancelled")
        var again = asked
        again.body = (["child": "c1", "attempt": 2, "createdAt": .int(h.now.milliseconds), "question": canonical] as JSONObject).encoded
        XCTAssertEqual(h.fromHub(again), .applied)
        XCTAssertEqual(h.events(g, "question").first?["question"]?["attempt"]?.int, 2)
        // A child this relay does not know is not its business.
        let other = try QuestionContent.validate(h.question(), now: h.now)
        let stranger = message(
            "fam.fam.ask.\(other.id)", ["child": "c7", "attempt": 1, "createdAt": 1, "question": try JSON.parse(other.encoded)])
        guard case .ignored = h.fromHub(stranger) else { return XCTFail("a question of an unknown child is ignored") }
        // Nor does a message on one family's stream reach another's guardians.
        let crossing = message(
            "fam.fam.ask.\(other.id)", ["child": "oc1", "attempt": 1, "createdAt": 1, "question": try JSON.parse(other.encoded)])
        guard case .ignored = h.fromHub(crossing) else { return XCTFail("a child of another family is not asked about on fam's stream") }
        let (og, _) = h.login("og1")
        XCTAssertTrue(h.events(og, "question").isEmpty)
    }

    func testExpiryIsProposedToTheHubAndTakesEffectWhenItComesBack() throws {
        let (h, g, c, id) = try asked(expiresIn: 60)
        h.fromHub(h.hubOutbox[0])
        _ = h.drain(g)
        h.advance(seconds: 61)
        XCTAssertTrue(h.events(c, "questionClosed").isEmpty, "not expired until the hub says so")
        let expire = try XCTUnwrap(h.hubOutbox.last)
        XCTAssertEqual(expire.messageID, "\(id)#1-\(h.now.milliseconds - 61_000):expire")
        h.advance(seconds: 10)
        XCTAssertEqual(h.hubOutbox.count, 1, "proposed once")
        h.fromHub(expire)
        XCTAssertEqual(h.events(c, "questionClosed").first?["reason"]?.string, "expired")
        XCTAssertEqual(h.events(g, "questionClosed").first?["reason"]?.string, "expired")
    }

    func testTheOutboxOutlivesARestartAndItsIdsAreNeverGivenTwice() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("hub-\(UUID().uuidString).db").path
        addTeardownBlock { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        for store in [MemoryStore(), try SQLiteStore(path: path)] as [RelayStore] {
            let h = try CoreHarness(store: store) { $0.hubDevice = "laptop" }
            h.standardFamilies()
            let (c, _) = h.login("c1", subscribe: ["communication"])
            h.ok(c, ["type": "ask", "question": .object(h.question())])
            h.ok(c, ["type": "ask", "question": .object(h.question())])
            h.fromHub(h.hubOutbox[0])  // back from the hub
            let left = h.hubOutbox
            XCTAssertEqual(left.count, 1)
            try h.restart()
            XCTAssertEqual(h.hubOutbox, left)
            h.core.hubSent(left[0].id)
            h.pump()
            XCTAssertEqual(h.hubOutbox, left, "stored by the hub, not back yet: it stays, also over a restart")
            try h.restart()
            XCTAssertEqual(h.hubOutbox, left)
            h.fromHub(left[0])
            XCTAssertEqual(h.hubOutbox, [])
            // The outbox empty, a restart still gives the next message an id above all before
            // (the bridge reads on after the last id it sent).
            try h.restart()
            let (c2, _) = h.login("c1", subscribe: ["communication"])
            h.ok(c2, ["type": "ask", "question": .object(h.question())])
            XCTAssertEqual(h.hubOutbox.map(\.id), [left[0].id + 1], "ids go on after the restart")
        }
    }

    /// The hub hands a message again only after a while: a relay killed before it stored
    /// an asking may get the decision on it first. It waits for the asking, unacknowledged.
    func testADecisionBeforeItsAskingWaitsForIt() throws {
        let h = try linked()
        let (g, _) = h.login("g1")
        let (c, _) = h.login("c1", subscribe: ["communication"])
        let q = h.question()
        let content = try QuestionContent.validate(q, now: h.now)
        let asking = "1-\(h.now.milliseconds)"
        let decision = message(
            "fam.fam.dec.\(content.id).\(asking)", ["kind": "answer", "member": "g2", "choice": "approve", "at": .int(h.now.milliseconds)])
        XCTAssertEqual(h.fromHub(decision), .held)
        let asked = message(
            "fam.fam.ask.\(content.id)",
            ["child": "c1", "attempt": 1, "createdAt": .int(h.now.milliseconds), "question": try JSON.parse(content.encoded)])
        XCTAssertEqual(h.fromHub(asked), .applied)
        XCTAssertEqual(h.events(c, "response").first?["guardian"]?.string, "g2", "decided as soon as its asking came")
        XCTAssertEqual(h.events(g, "questionClosed").first?["by"]?.string, "g2")
        XCTAssertEqual(h.fromHub(decision), .known, "handed again by the hub: nothing more")
    }

    private func firstHandle(_ question: JSON?) -> String? {
        question?["topic"]?["personInformation"]?.array?.first?["handle"]?["value"]?.string
    }

    /// The tablet's asking of `q` (attempt 1, made `after` ms after now), as its relay sends it.
    private func tabletAsked(_ h: CoreHarness, _ q: JSONObject, after: Int64 = 1) throws -> HubOutbound {
        try tabletAskedAt(h, q, createdAt: h.now.milliseconds + after)
    }

    /// A child asks one new id on two devices at once: whichever asking the hub has first
    /// stands on every relay, the other is left behind, and the guardians here are not asked
    /// again about what they have.
    func testTwoDevicesAskingOneIdAtOnceAgreeOnTheOneFirstOnTheHub() throws {
        let h = try linked()
        let (g, _) = h.login("g1")
        let (c, _) = h.login("c1", subscribe: ["communication"])
        func pendingHandles() -> [String] {
            (h.ok(g, ["type": "pending"])["questions"]?.array ?? []).compactMap { firstHandle($0) }
        }

        // The tablet's comes first from the hub: it stands, here too, and ours coming back after it changes nothing.
        let ours = h.question(handles: ["+1 555 0100"])
        h.ok(c, ["type": "ask", "question": .object(ours)])
        XCTAssertEqual(h.events(g, "question").count, 1)
        let theirs = version(of: ours, asking: "+1 555 0199")
        let tablet = try tabletAsked(h, theirs, after: -1)  // the order on the hub decides, not the clocks
        let own = try XCTUnwrap(h.hubOutbox.first)
        XCTAssertEqual(h.fromHub(tablet), .applied)
        XCTAssertEqual(firstHandle(h.events(g, "question").first?["question"]), "+1 555 0199")
        XCTAssertEqual(h.fromHub(own), .known)
        XCTAssertEqual(h.fromHub(tablet), .known, "handed again")
        XCTAssertTrue(h.drain(g).isEmpty)
        XCTAssertEqual(pendingHandles(), ["+1 555 0199"])
        // A decision on the asking left behind is left behind too (not held for an asking to come).
        let behind = message(
            "fam.fam.dec.\(own.subject.split(separator: ".").last!).\(own.messageID.split(separator: "#").last!)",
            ["kind": "cancel", "member": "c1", "at": 1])
        XCTAssertEqual(h.fromHub(behind), .known)

        // Ours comes back first: it stands, and the tablet's after it is left behind.
        let second = h.question(handles: ["+1 555 0101"])
        h.ok(c, ["type": "ask", "question": .object(second)])
        XCTAssertEqual(h.fromHub(try XCTUnwrap(h.hubOutbox.last)), .known)
        var late = second
        late["topic"] = theirs["topic"]
        XCTAssertEqual(h.fromHub(try tabletAsked(h, late, after: 1)), .known, "first on the hub, not last by the clock")
        XCTAssertEqual(pendingHandles().sorted(), ["+1 555 0101", "+1 555 0199"])

        // Both asked in the same millisecond: told apart by their devices.
        let third = h.question(handles: ["+1 555 0102"])
        h.ok(c, ["type": "ask", "question": .object(third)])
        let ownThird = try XCTUnwrap(h.hubOutbox.last)
        var same = third
        same["topic"] = theirs["topic"]
        XCTAssertEqual(h.fromHub(try tabletAsked(h, same, after: 0)), .applied)
        XCTAssertEqual(h.fromHub(ownThird), .known)
        XCTAssertEqual(pendingHandles().sorted(), ["+1 555 0101", "+1 555 0199", "+1 555 0199"])
    }

    /// The hub hands a message that was in flight when the link dropped again only after
    /// those stored behind it: an asking stored before this relay's own but handed after it
    /// still stands instead, as on every relay, and a decision on it handed before it waits.
    func testAnAskingStoredFirstOnTheHubButHandedAfterOursStandsInstead() throws {
        let h = try linked()
        let (g, _) = h.login("g1")
        let (c, _) = h.login("c1", subscribe: ["communication"])
        func pendingHandles() -> [String] {
            (h.ok(g, ["type": "pending"])["questions"]?.array ?? []).compactMap { firstHandle($0) }
        }
        let t = h.now.milliseconds
        for (n, decidedFirst) in [(0, false), (1, true)] {
            let ours = h.question(handles: ["+1 555 010\(n)"])
            let id = ours["id"]!.string!.uppercased()
            h.ok(c, ["type": "ask", "question": .object(ours)])
            let own = try XCTUnwrap(h.hubOutbox.last)
            let theirs = version(of: ours, asking: "+1 555 019\(n)")
            let tablet = try tabletAskedAt(h, theirs, createdAt: t - 1)
            let base = UInt64(10 * n)
            XCTAssertEqual(h.fromHub(own, sequence: base + 3), .known, "ours, back: it stands for now")
            let decision = message(
                "fam.fam.dec.\(id).1-\(t - 1)", ["kind": "answer", "member": "g2", "choice": "approve", "at": .int(t)])
            if decidedFirst {
                XCTAssertEqual(h.fromHub(decision, sequence: base + 4), .held, "its asking may yet come, stored before ours")
            }
            XCTAssertEqual(h.fromHub(tablet, sequence: base + 2), .applied, "stored first on the hub: it stands")
            XCTAssertEqual(h.fromHub(own, sequence: base + 3), .known, "handed again: left behind")
            if decidedFirst {
                XCTAssertEqual(h.events(c, "response").count, 1, "the decision held for it took effect")
            } else {
                XCTAssertTrue(pendingHandles().contains("+1 555 019\(n)"))
                XCTAssertFalse(pendingHandles().contains("+1 555 010\(n)"))
                XCTAssertEqual(h.fromHub(decision, sequence: base + 4), .applied)
                XCTAssertEqual(h.events(c, "response").count, 1)
            }
            XCTAssertTrue(pendingHandles().isEmpty)
        }
    }

    /// What the relay keeps in memory about askings on the hub goes with its question: the
    /// stream position of a question closed here (its child removed) or asked again, and a
    /// decision held for an asking that was then left behind.
    func testWhatIsKeptAboutAskingsGoesWithThem() throws {
        let h = try linked()
        let q = h.question()
        let t = h.now.milliseconds
        XCTAssertEqual(h.fromHub(try tabletAskedAt(h, q, createdAt: t), sequence: 1), .applied)
        XCTAssertEqual(h.fromHub(try tabletAskedAt(h, q, attempt: 2, createdAt: t), sequence: 3), .applied)
        XCTAssertEqual(h.core.hubStandingAt.count, 1, "the attempt asked again replaces the first")
        h.ok(h.admin(), ["type": "removeMember", "member": "c1"])
        XCTAssertTrue(h.core.hubStandingAt.isEmpty, "closed here with its child")

        let h2 = try linked()
        let other = h2.question()
        let otherID = other["id"]!.string!.uppercased()
        XCTAssertEqual(h2.fromHub(try tabletAskedAt(h2, other, createdAt: t), sequence: 2), .applied)
        let onLater = message("fam.fam.dec.\(otherID).1-\(t + 10)", ["kind": "cancel", "member": "c1", "at": .int(t)])
        XCTAssertEqual(h2.fromHub(onLater, sequence: 4), .held, "its asking may yet come, stored before the one here")
        XCTAssertEqual(h2.fromHub(try tabletAskedAt(h2, other, createdAt: t + 10, device: "desktop"), sequence: 3), .known)
        XCTAssertEqual(h2.fromHub(onLater, deliveries: 2, sequence: 4), .known, "left behind with its asking")
        XCTAssertTrue(h2.core.hubEarly.isEmpty)
    }

    /// An asking still in the outbox after a restart is still this relay's, on its way.
    func testAnAskingOnItsWayToTheHubIsStillOnItsWayAfterARestart() throws {
        let h = try linked()
        let (c, _) = h.login("c1")
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        try h.restart()
        let (g, _) = h.login("g1")
        XCTAssertEqual(h.fromHub(try tabletAsked(h, q, after: -1)), .applied, "the tablet's came first from the hub")
        XCTAssertTrue(h.events(g, "question").isEmpty, "the same question: nobody is asked again")
    }

    /// A guardian here answered our asking before the tablet's, the same question, came first
    /// from the hub: the answer is proposed again on the one that stands. Had the tablet asked
    /// something else, it is refused: the guardian must look again.
    func testAnAnswerToAnAskingLeftBehindGoesToTheOneThatStandsIfItAsksTheSame() throws {
        let h = try linked()
        let (g, _) = h.login("g1")
        let (c, _) = h.login("c1", subscribe: ["communication"])
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        _ = h.events(g, "question")
        h.send(g, ["type": "answer", "id": "a1", "questionId": q["id"]!, "choice": "approve"])
        let tablet = try tabletAsked(h, q)
        XCTAssertEqual(h.fromHub(tablet), .applied)
        XCTAssertTrue(h.drain(g).isEmpty, "asked the same: the guardians are not asked again, and the answer still waits")
        let id = q["id"]!.string!.uppercased()
        let redirected = try XCTUnwrap(h.hubOutbox.last)
        XCTAssertEqual(redirected.messageID, "\(id)#1-\(h.now.milliseconds + 1):answer:g1:approve")
        XCTAssertEqual(h.fromHub(redirected), .applied)
        XCTAssertEqual(h.drain(g).first { $0["re"]?.string == "a1" }?["type"]?.string, "ok")
        XCTAssertEqual(h.events(c, "response").first?["choice"]?["id"]?.string, "approve")

        let asked = h.question(handles: ["+1 555 0100"])
        h.ok(c, ["type": "ask", "question": .object(asked)])
        h.send(g, ["type": "answer", "id": "a2", "questionId": asked["id"]!, "choice": "approve"])
        let other = version(of: asked, asking: "+1 555 0199")
        XCTAssertEqual(h.fromHub(try tabletAsked(h, other)), .applied)
        XCTAssertEqual(h.drain(g).first { $0["re"]?.string == "a2" }?["code"]?.string, "conflict")
        XCTAssertTrue(h.events(c, "response").isEmpty, "nothing the guardian was not shown is approved")

        // A cancel is of the question, whatever it asks: it goes to the one that stands.
        let cancelled = h.question(handles: ["+1 555 0103"])
        h.ok(c, ["type": "ask", "question": .object(cancelled)])
        h.send(c, ["type": "cancel", "id": "x1", "questionId": cancelled["id"]!])
        var standing = cancelled
        standing["topic"] = other["topic"]
        XCTAssertEqual(h.fromHub(try tabletAsked(h, standing)), .applied)
        let cancel = try XCTUnwrap(h.hubOutbox.last)
        XCTAssertEqual(cancel.messageID, "\(cancelled["id"]!.string!.uppercased())#1-\(h.now.milliseconds + 1):cancel")
        XCTAssertEqual(h.fromHub(cancel), .applied)
        XCTAssertEqual(h.drain(c).first { $0["re"]?.string == "x1" }?["status"]?.string, "cancelled")
    }

    /// A guardian's answer proposed to the hub, then its question cancelled here (its child
    /// removed), committed and let go: when the proposal comes back, the request is answered.
    func testAProposalWaitingWhenItsQuestionIsLetGoGetsItsReply() throws {
        let h = try CoreHarness { $0.hubDevice = "laptop" }
        h.standardFamilies()
        let (g, _) = h.login("g1")
        let (c, _) = h.login("c1")
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        let id = q["id"]!.string!.uppercased()
        h.send(g, ["type": "answer", "id": "a1", "questionId": .string(id), "choice": "approve"])
        let proposal = try XCTUnwrap(h.hubOutbox.last)
        h.ok(h.admin(), ["type": "removeMember", "member": "c1"])
        XCTAssertEqual(h.core.questions.count, 0, "cancelled, committed and let go")
        _ = h.drain(g)
        h.fromHub(proposal)
        let reply = h.drain(g).first { $0["re"]?.string == "a1" }
        XCTAssertEqual(reply?["code"]?.string, "cancelled", "\(String(describing: reply))")
    }

    /// A question id the relay forgot and the child asks anew is a new asking, with a
    /// decision subject of its own (the old one holds the old decision for good).
    func testAnIdAskedAnewAfterItWasForgottenIsANewAsking() throws {
        let h = try CoreHarness(kept: QuestionsKept(count: 1)) { $0.hubDevice = "laptop" }
        h.standardFamilies()
        let (c, _) = h.login("c1", subscribe: ["communication"])
        let q = h.question()
        let id = q["id"]!.string!.uppercased()
        h.ok(c, ["type": "ask", "question": .object(q)])
        let first = try XCTUnwrap(h.hubOutbox.first)
        h.fromHub(first)
        h.send(c, ["type": "cancel", "id": "x", "questionId": .string(id)])
        h.fromHub(try XCTUnwrap(h.hubOutbox.last))
        h.ok(c, ["type": "ask", "question": .object(h.question())])  // forgets the first
        h.advance(seconds: 5)
        h.ok(c, ["type": "ask", "question": .object(q)])
        let again = try XCTUnwrap(h.hubOutbox.last)
        XCTAssertEqual(again.subject, first.subject)
        XCTAssertNotEqual(again.messageID, first.messageID, "the hub must not drop it as a resend")
        h.fromHub(again)
        h.send(c, ["type": "cancel", "id": "y", "questionId": .string(id)])
        let cancel = try XCTUnwrap(h.hubOutbox.last)
        XCTAssertEqual(cancel.subject, "fam.fam.dec.\(id).1-\(h.now.milliseconds)")
        h.fromHub(cancel)
        XCTAssertEqual(h.drain(c).first { $0["re"]?.string == "y" }?["type"]?.string, "ok")
    }

    /// An answer takes effect as of when it was given on its device: a relay that hears of
    /// it a day later does not start a timed approval afresh.
    func testADecisionTakesEffectAsOfWhenItWasMade() throws {
        let h = try linked()
        let (c, _) = h.login("c1", subscribe: ["communication"])
        let choices: JSON = .array([
            .object(["id": "hour", "title": "For an hour", "answer": "approval", "durationSeconds": 3600]),
            .object(["id": "no", "title": "No", "answer": "denial"]),
        ])
        let q = h.question(expiresIn: 7 * 86400, choices: choices, defaultChoice: "no")
        let id = q["id"]!.string!.uppercased()
        h.ok(c, ["type": "ask", "question": .object(q)])
        h.fromHub(try XCTUnwrap(h.hubOutbox.first))
        let asking = "1-\(h.now.milliseconds)"
        let answeredAt = h.now.milliseconds + 60_000
        h.advance(seconds: 86400)
        h.fromHub(message("fam.fam.dec.\(id).\(asking)", ["kind": "answer", "member": "g2", "choice": "hour", "at": .int(answeredAt)]))
        let response = try XCTUnwrap(h.events(c, "response").first)
        XCTAssertEqual(response["answeredAt"]?.string, Timestamp(milliseconds: answeredAt).rfc3339)
        let known = h.request(c, ["type": "knownHandles", "handles": [.object(["value": "+1 555 0100", "kind": "phoneNumber"])]])
        XCTAssertEqual(known["known"]?.array?.count, 0, "the hour ran out long ago")
    }

    /// The tablet's asking of `q` (attempt `attempt`, made at `createdAt`), as its relay sends it.
    private func tabletAskedAt(
        _ h: CoreHarness, _ q: JSONObject, attempt: Int64 = 1, createdAt: Int64, device: String = "tablet"
    ) throws -> HubOutbound {
        let content = try QuestionContent.validate(q, now: h.now)
        return message(
            "fam.fam.ask.\(content.id)",
            [
                "child": "c1", "attempt": .int(attempt), "createdAt": .int(createdAt), "question": try JSON.parse(content.encoded),
                "device": .string(device),
            ])
    }

    /// Our asking was stored by the hub after the tablet's, and the relay restarted before
    /// the hub handed either back: ours is still on its way, and gives way to the tablet's.
    func testOwnAskingSentButNotBackBeforeARestartStillGivesWay() throws {
        let h = try linked()
        let (c, _) = h.login("c1")
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        let own = try XCTUnwrap(h.hubOutbox.first)
        h.core.hubSent(own.id)
        h.pump()
        try h.restart()
        XCTAssertEqual(
            h.fromHub(try tabletAskedAt(h, q, createdAt: h.now.milliseconds + 1)), .applied,
            "the tablet's was first on the hub: it must stand here as on every other relay")
    }

    /// Our asking came back from the hub (first there) before the hub's receipt of it; then
    /// the relay restarted: it is back, so the tablet's, stored after it, is left behind.
    func testOwnAskingBackBeforeItsSentThenRestartDoesNotGiveWayToALaterOne() throws {
        let h = try linked()
        let (c, _) = h.login("c1")
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        let own = try XCTUnwrap(h.hubOutbox.first)
        XCTAssertEqual(h.fromHub(own), .known, "ours back: it stands")
        try h.restart()
        XCTAssertEqual(
            h.fromHub(try tabletAskedAt(h, q, createdAt: h.now.milliseconds + 1)), .known,
            "stored after ours on the hub: left behind here, as on the tablet and every other relay")
    }

    /// 3. Two askings with one hub key (a re-ask made on two devices at once keeps the first
    /// createdAt, so both are `2-T`; or the same millisecond) asking different things: the
    /// guardian here is told `conflict`, and its answer, first on the decision subject of the
    /// asking that stands, approves nothing it was not shown.
    func testAnAnswerToAnotherVersionOnASharedSubjectApprovesNothingItWasNotShown() throws {
        let h = try linked()
        let (g, _) = h.login("g1")
        let (c, _) = h.login("c1", subscribe: ["communication"])
        let ours = h.question(handles: ["+1 555 0100"])
        let id = ours["id"]!.string!.uppercased()
        h.ok(c, ["type": "ask", "question": .object(ours)])
        h.fromHub(try XCTUnwrap(h.hubOutbox.first))
        let createdAt = h.now.milliseconds
        // Attempt 1 cancelled (through the hub), then re-asked here and on the tablet at once.
        h.send(c, ["type": "cancel", "id": "x", "questionId": .string(id)])
        h.fromHub(try XCTUnwrap(h.hubOutbox.last))
        h.advance(seconds: 10)
        h.ok(c, ["type": "ask", "question": .object(ours)])
        XCTAssertEqual(try XCTUnwrap(h.hubOutbox.last).messageID, "\(id)#2-\(createdAt)")
        _ = h.drain(g)
        h.send(g, ["type": "answer", "id": "a2", "questionId": .string(id), "choice": "approve"])
        let proposal = try XCTUnwrap(h.hubOutbox.last)
        XCTAssertEqual(proposal.subject, "fam.fam.dec.\(id).2-\(createdAt)")
        let other = version(of: ours, asking: "+1 555 0199")
        // The hub had the tablet's `2-T` first (ours, the same message id, is dropped as a resend).
        XCTAssertEqual(h.fromHub(try tabletAskedAt(h, other, attempt: 2, createdAt: createdAt)), .applied)
        XCTAssertEqual(h.drain(g).first { $0["re"]?.string == "a2" }?["code"]?.string, "conflict")
        // Our proposal is still in the outbox and reaches the hub, first on that subject.
        XCTAssertEqual(h.fromHub(proposal), .applied)
        XCTAssertTrue(
            h.events(c, "response").isEmpty,
            "the guardian was told conflict, and never shown +1 555 0199: nothing may be approved")
        let known = h.request(c, ["type": "knownHandles", "handles": [.object(["value": "+1 555 0199", "kind": "phoneNumber"])]])
        XCTAssertEqual(known["known"]?.array?.count, 0, "a handle no guardian approved became known")
    }

    /// 3b. The same, where the version here has choices of its own: the guardian's answer,
    /// first on the shared subject, names a choice the standing version lacks. It closes the
    /// question unanswered rather than hold the subject with a decision no relay applies.
    func testAnAnswerToAnotherVersionOnASharedSubjectClosesTheQuestionUnanswered() throws {
        let h = try linked()
        let (g, _) = h.login("g1")
        let (c, _) = h.login("c1", subscribe: ["communication"])
        let choices: JSON = .array([
            .object(["id": "yes", "title": "Yes", "answer": "approval"]), .object(["id": "no", "title": "No", "answer": "denial"]),
        ])
        let ours = h.question(choices: choices)
        let id = ours["id"]!.string!.uppercased()
        h.ok(c, ["type": "ask", "question": .object(ours)])
        let createdAt = h.now.milliseconds
        _ = h.drain(g)
        h.send(g, ["type": "answer", "id": "a1", "questionId": .string(id), "choice": "yes"])
        let proposal = try XCTUnwrap(h.hubOutbox.last)
        var theirs = ours
        theirs["choices"] = nil  // approve / decline
        XCTAssertEqual(h.fromHub(try tabletAskedAt(h, theirs, createdAt: createdAt)), .applied)  // same millisecond
        XCTAssertEqual(h.drain(g).first { $0["re"]?.string == "a1" }?["code"]?.string, "conflict")
        XCTAssertEqual(h.fromHub(proposal), .applied)
        XCTAssertEqual(h.events(c, "questionClosed").first?["reason"]?.string, "cancelled")
        XCTAssertTrue(h.events(c, "response").isEmpty)
        XCTAssertEqual(h.ok(g, ["type": "pending"])["questions"]?.array?.count, 0)
    }

    /// An answer names the content it answered by a digest every relay computes alike,
    /// whether the question was asked there (as validated) or came through the hub.
    func testAContentsDigestIsTheSameWhereItWasAskedAndWhereItCameThroughTheHub() throws {
        let h = try linked()
        var q = h.question(handles: ["+1 555 0100", "+44 20 7946 0000"], actions: ["message", "call"])
        q["choices"] = .array([
            .object(["id": "week", "title": "Für eine Woche \"ok\" \u{1F44D}", "answer": "approval", "durationSeconds": 604_800]),
            .object(["id": "no", "title": "Non / \\ <tab>\t", "answer": "denial"]),
        ])
        q["defaultChoice"] = "no"
        let asked = try QuestionContent.validate(q, now: h.now)
        let carried = try XCTUnwrap(QuestionContent(encoded: try JSON.parse(asked.encoded).encoded))
        XCTAssertEqual(RelayCore.digest(asked), RelayCore.digest(carried))
        XCTAssertEqual(RelayCore.digest(asked).count, 64)
        q["defaultChoice"] = "week"
        XCTAssertNotEqual(RelayCore.digest(try QuestionContent.validate(q, now: h.now)), RelayCore.digest(asked))
    }

    /// An id the tablet's relay forgot and its child asked anew (attempt 1 again, at a later
    /// time; see HubNames.asking) is a new asking here, where the id is remembered, whether
    /// it was cancelled or answered here, and takes the tablet's decision.
    func testAnIdForgottenOnTheTabletAndAskedAnewReachesTheGuardiansHere() throws {
        for answered in [false, true] {
            let h = try linked()
            let (g, _) = h.login("g1")
            let (c, _) = h.login("c1", subscribe: ["communication"])
            let q = h.question(expiresIn: nil)
            let id = q["id"]!.string!.uppercased()
            h.ok(c, ["type": "ask", "question": .object(q)])
            h.fromHub(try XCTUnwrap(h.hubOutbox.first))
            if answered {
                h.send(g, ["type": "answer", "id": "a", "questionId": .string(id), "choice": "decline"])
            } else {
                h.send(c, ["type": "cancel", "id": "x", "questionId": .string(id)])
            }
            XCTAssertEqual(h.fromHub(try XCTUnwrap(h.hubOutbox.last)), .applied)
            _ = (h.drain(g), h.drain(c))
            h.advance(seconds: 3600)
            let t = h.now.milliseconds
            XCTAssertEqual(h.fromHub(try tabletAskedAt(h, q, createdAt: t)), .applied, "answered: \(answered)")
            XCTAssertEqual(h.events(g, "question").count, 1)
            let decision = message("fam.fam.dec.\(id).1-\(t)", ["kind": "answer", "member": "g2", "choice": "approve", "at": .int(t)])
            XCTAssertEqual(h.fromHub(decision), .applied)
            XCTAssertEqual(h.events(c, "response").count, 1)
        }
    }

    /// A left-behind asking handed again (an acknowledgement lost with the link, say) after
    /// the one that stood was answered changes nothing: it does not open the question anew here.
    func testALeftBehindAskingHandedAgainDoesNotReopenTheQuestion() throws {
        let h = try linked()
        let (g, _) = h.login("g1")
        let (c, _) = h.login("c1", subscribe: ["communication"])
        let q = h.question()
        let id = q["id"]!.string!.uppercased()
        let t = h.now.milliseconds
        let other = version(of: q, asking: "+1 555 0199")
        let behind = try tabletAskedAt(h, other, createdAt: t + 5000, device: "desktop")
        XCTAssertEqual(h.fromHub(try tabletAskedAt(h, q, createdAt: t)), .applied)
        XCTAssertEqual(h.fromHub(behind), .known, "second on the hub: left behind")
        XCTAssertEqual(
            h.fromHub(message("fam.fam.dec.\(id).1-\(t)", ["kind": "answer", "member": "g2", "choice": "approve", "at": .int(t)])), .applied
        )
        _ = h.drain(g)
        XCTAssertEqual(h.fromHub(behind), .known, "handed again: it changes nothing")
        XCTAssertTrue(h.events(g, "question").isEmpty)
        XCTAssertEqual(h.ok(g, ["type": "pending"])["questions"]?.array?.count, 0)
    }

    /// This relay's own asking comes back even when it is not for this relay any more (its
    /// child removed meanwhile): it leaves the outbox all the same.
    func testAnAskingOfAChildRemovedBeforeItCameBackLeavesTheOutbox() throws {
        let h = try linked()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        h.ok(c, ["type": "ask", "question": .object(h.question())])
        let own = try XCTUnwrap(h.hubOutbox.first)
        h.core.hubSent(own.id)
        h.ok(h.admin(), ["type": "removeMember", "member": "c1"])
        _ = h.fromHub(own)
        XCTAssertEqual(h.hubOutbox.count, 0)
        XCTAssertEqual(h.ok(g, ["type": "familyLink"])["waiting"]?.int, 0)
    }

    /// A decision on this relay's own asking that the hub hands before the asking itself
    /// (handed again after a crash, say) waits for where the asking stands: another
    /// device's may have been first, and then the decision is left behind, as everywhere.
    func testADecisionOnOurAskingBeforeItIsBackWaitsForWhereItStands() throws {
        let h = try linked()
        let (g, _) = h.login("g1")
        let (c, _) = h.login("c1", subscribe: ["communication"])
        let q = h.question(handles: ["+1 555 0100"])
        let id = q["id"]!.string!.uppercased()
        h.ok(c, ["type": "ask", "question": .object(q)])
        let own = try XCTUnwrap(h.hubOutbox.first)
        _ = h.drain(g)
        h.send(g, ["type": "answer", "id": "a1", "questionId": .string(id), "choice": "approve"])
        let proposal = try XCTUnwrap(h.hubOutbox.last)
        let other = version(of: q, asking: "+1 555 0199")
        XCTAssertEqual(h.fromHub(proposal), .held, "ours is not back")
        XCTAssertEqual(h.fromHub(try tabletAskedAt(h, other, createdAt: h.now.milliseconds - 1)), .applied)
        XCTAssertEqual(h.fromHub(own), .known)
        _ = h.fromHub(proposal)
        XCTAssertEqual(h.ok(g, ["type": "pending"])["questions"]?.array?.count, 1)
        let known = h.request(c, ["type": "knownHandles", "handles": [.object(["value": "+1 555 0100", "kind": "phoneNumber"])]])
        XCTAssertEqual(known["known"]?.array?.count, 0, "approved on no relay")

        // Ours first after all: the decision held meanwhile takes effect as it comes back.
        let second = h.question(handles: ["+1 555 0101"])
        h.ok(c, ["type": "ask", "question": .object(second)])
        let ownSecond = try XCTUnwrap(h.hubOutbox.last)
        h.send(g, ["type": "answer", "id": "a2", "questionId": second["id"]!, "choice": "approve"])
        XCTAssertEqual(h.fromHub(try XCTUnwrap(h.hubOutbox.last)), .held)
        XCTAssertEqual(h.fromHub(ownSecond), .known)
        XCTAssertEqual(h.drain(g).first { $0["re"]?.string == "a2" }?["type"]?.string, "ok")
    }

    /// A decision whose asking never comes (left behind before a restart, or of a question
    /// not for this relay) is held only so long: then it goes, and is not handed again.
    func testADecisionWhoseAskingNeverComesIsNotHeldForever() throws {
        let h = try linked()
        let content = try QuestionContent.validate(h.question(), now: h.now)
        let asked = message(
            "fam.fam.ask.\(content.id)",
            [
                "child": "c7", "attempt": 1, "createdAt": .int(h.now.milliseconds), "question": try JSON.parse(content.encoded),
                "device": "tablet",
            ])
        guard case .ignored = h.fromHub(asked) else { return XCTFail("a child unknown here") }
        let decided = message("fam.fam.dec.\(content.id).1-\(h.now.milliseconds)", ["kind": "cancel", "member": "c7", "at": 1])
        XCTAssertEqual(h.fromHub(decided), .held, "its asking may yet come")
        XCTAssertEqual(h.fromHub(decided, deliveries: RelayCore.hubHoldLimit - 1), .held)
        guard case .ignored(let why) = h.fromHub(decided, deliveries: RelayCore.hubHoldLimit) else { return XCTFail("held for good") }
        XCTAssertTrue(why.contains("whose asking never came"), why)
    }

    /// The first decision on an asking decides it, also one this relay cannot apply as it
    /// says (a newer relay's kind, an answer that names no guardian): it closes the question
    /// unanswered, rather than leave it pending behind a subject the hub keeps for it.
    func testAFirstDecisionNoRelayCanApplyClosesTheQuestionUnanswered() throws {
        for body in [["kind": "postpone", "at": 1], ["kind": "answer", "choice": "approve", "at": 1]] as [JSONObject] {
            let (h, g, c, id) = try asked()
            h.fromHub(h.hubOutbox[0])
            _ = h.drain(g)
            XCTAssertEqual(h.fromHub(message("fam.fam.dec.\(id).1-\(h.now.milliseconds)", body)), .applied)
            XCTAssertEqual(h.events(c, "questionClosed").first?["reason"]?.string, "cancelled", "\(body)")
            XCTAssertTrue(h.events(c, "response").isEmpty)
        }
    }
}
