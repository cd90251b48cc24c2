import RelayCore
import RelayProtocol
import RelayModel
import RelayStore
import Foundation
import XCTest

final class DeliveryTests: XCTestCase {
    func testOutputsCausedWhileDrainingAreDrainedInTheSameCall() throws {
        let h = try CoreHarness()
        let a = h.connect()
        let b = h.connect()
        h.core.receive(a, body: Array("not json".utf8), now: h.now)
        var sentTo: [ConnectionID] = []
        h.core.drainOutputs { output in
            guard case .send(let conn, _) = output else { return }
            sentTo.append(conn)
            if conn == a { h.core.receive(b, body: Array("not json".utf8), now: h.now) }
        }
        XCTAssertEqual(sentTo, [a, b], "b's error, caused while a's was handed out, comes in the same drain")
        XCTAssertTrue(h.core.takeOutputs().isEmpty)
    }

    func testSubscriptionsFilterChildEvents() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (none, _) = h.login("c1")
        let (comm, _) = h.login("c1", subscribe: ["communication"])
        let (updates, _) = h.login("c1", subscribe: ["significantAppUpdate"])
        let (g, _) = h.login("g1")
        let q = h.question()
        let u = h.updateQuestion()
        h.ok(comm, ["type": "ask", "question": .object(q)])
        h.ok(comm, ["type": "ask", "question": .object(u)])
        h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": "decline"])
        h.ok(g, ["type": "answer", "questionId": u["id"]!, "choice": "approve"])
        XCTAssertTrue(h.events(none, "response").isEmpty)
        XCTAssertEqual(h.events(comm, "response").map { $0["question"]?["id"] }, [q["id"]])
        XCTAssertEqual(h.events(updates, "response").map { $0["question"]?["id"] }, [u["id"]])
        h.ok(g, ["type": "setLimits", "child": "c1", "enabled": false])
        for c in [none, comm, updates] { XCTAssertEqual(h.events(c, "limitsChanged").count, 1, "limitsChanged reaches every session") }
        let r = h.ok(comm, ["type": "subscribe", "topics": ["significantAppUpdate", "communication"]])
        XCTAssertEqual(r["topics"], ["communication", "significantAppUpdate"])
        _ = h.error(comm, ["type": "subscribe", "topics": ["news"]], .badRequest)
    }

    /// A session the relay does not know (forgotten, or newer than a restored backup) has no
    /// subscriptions: its replay passes responses only with the topics its hello names.
    func testAChildsHelloNamesTheTopicsItsReplayPasses() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1", subscribe: ["communication"])
        let (g, _) = h.login("g1")
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": "approve"])
        let seq = try XCTUnwrap(h.events(c, "response").first?["seq"]?.int)

        let (plain, _) = h.login("c1", session: "forgotten", resume: seq - 1)
        XCTAssertTrue(h.events(plain, "response").isEmpty, "a new session subscribes to nothing")
        let (named, _) = h.login("c1", session: "also-forgotten", resume: seq - 1, helloTopics: ["communication"])
        XCTAssertEqual(h.events(named, "response").map { $0["seq"]?.int }, [seq])
        // They are the session's from then on, as a subscribe's would be.
        h.core.disconnected(named)
        let (again, _) = h.login("c1", session: "also-forgotten", resume: seq - 1)
        XCTAssertEqual(h.events(again, "response").map { $0["seq"]?.int }, [seq])
        let (other, _) = h.login("c1", session: "also-forgotten", resume: seq - 1, helloTopics: ["significantAppUpdate"])
        XCTAssertTrue(h.events(other, "response").isEmpty, "the hello's topics replace the stored ones")
        let (ephemeral, _) = h.login("c1", helloTopics: [])
        XCTAssertNil(h.closed[ephemeral])

        // A kind this relay does not know is left out (a newer client is not locked out); a list that is no list is refused.
        let (newer, _) = h.login("c1", session: "newer", resume: seq - 1, helloTopics: ["communication", "news"])
        XCTAssertEqual(h.events(newer, "response").map { $0["seq"]?.int }, [seq])
        let bad = h.connect()
        h.send(
            bad, ["type": "hello", "id": "h", "protocol": 1, "member": "c1", "token": .string(h.tokens["c1"]!), "topics": "communication"])
        XCTAssertEqual(h.drain(bad).first?["code"]?.string, "unauthorized")
        XCTAssertEqual(h.closed[bad], .handshakeFailed)
        let (guardian, _) = h.login("g1", session: "tab", resume: 0, helloTopics: "not even a list")
        XCTAssertEqual(h.events(guardian, "question").count, 1, "a guardian's topics are ignored: it gets all its events")
    }

    func testReplyComesBeforeTheEventsItCauses() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1", subscribe: ["communication"])
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        h.send(c, ["type": "cancel", "id": "x", "questionId": q["id"]!])
        let frames = h.drain(c)
        XCTAssertEqual(frames.map { $0["type"]?.string }, ["ok", "questionClosed"])
    }

    func testDurableSessionReplaysUnacknowledgedEventsWithTheSameSeq() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (g, w) = h.login("g1", session: "tab")
        XCTAssertEqual(w["cursor"]?.int, 0)
        let (c, _) = h.login("c1")
        let q1 = h.question(), q2 = h.question()
        h.ok(c, ["type": "ask", "question": .object(q1)])
        h.ok(c, ["type": "ask", "question": .object(q2)])
        let live = h.events(g, "question")
        XCTAssertEqual(live.map { $0["seq"]?.int }, [1, 2])
        h.send(g, ["type": "ack", "seq": 1])
        h.core.disconnected(g)
        h.core.flushCursors()

        let (g2, w2) = h.login("g1", session: "tab")
        XCTAssertEqual(w2["cursor"]?.int, 1)
        XCTAssertEqual(w2["head"]?.int, 2)
        let replay = h.events(g2, "question")
        XCTAssertEqual(replay.map { $0["seq"]?.int }, [2])
        XCTAssertEqual(replay.first?["question"]?["id"], q2["id"])

        // resume overrides the stored cursor for the replay, never moves it back.
        let (g3, w3) = h.login("g1", session: "tab", resume: 0)
        XCTAssertEqual(w3["cursor"]?.int, 0)
        XCTAssertEqual(h.events(g3, "question").count, 2)
        let (_, w4) = h.login("g1", session: "tab")
        XCTAssertEqual(w4["cursor"]?.int, 1)
        // resume above the head is taken as the head, and counts as an ack.
        let (_, w5) = h.login("g1", session: "tab", resume: 99)
        XCTAssertEqual(w5["cursor"]?.int, 2)
        let (_, w6) = h.login("g1", session: "tab")
        XCTAssertEqual(w6["cursor"]?.int, 2)
    }

    func testNewDurableSessionStartsAtHeadAndEphemeralGetsNoReplay() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        h.ok(c, ["type": "ask", "question": .object(h.question())])
        let (g, w) = h.login("g1", session: "fresh")
        XCTAssertEqual(w["cursor"]?.int, 1)
        XCTAssertTrue(h.drain(g).isEmpty)
        let (e, we) = h.login("g1", resume: 0)
        XCTAssertNil(we["cursor"])
        XCTAssertTrue(h.drain(e).isEmpty, "ephemeral sessions ignore resume")
        let (r, wr) = h.login("g1", session: "from-zero", resume: 0)
        XCTAssertEqual(wr["cursor"]?.int, 0)
        XCTAssertEqual(h.events(r, "question").count, 1, "a member who never acked can resume from 0")
    }

    func testLongReplayIsStepwiseAndHoldsLaterRequests() throws {
        let h = try CoreHarness { $0.replayBatch = 4 }
        h.standardFamilies()
        let (c, _) = h.login("c1")
        for _ in 0..<10 { h.ok(c, ["type": "ask", "question": .object(h.question())]) }
        let g = h.connect(uid: 1)
        h.send(
            g, ["type": "hello", "id": "h", "protocol": 1, "member": "g1", "token": .string(h.tokens["g1"]!), "session": "s", "resume": 0])
        XCTAssertTrue(h.core.isReplaying(g))
        var seqs = h.drain(g).compactMap { $0["seq"]?.int }
        var steps = 1
        while h.core.isReplaying(g) {
            h.pump()
            seqs += h.drain(g).compactMap { $0["seq"]?.int }
            steps += 1
        }
        XCTAssertEqual(seqs, Array(1...10))
        XCTAssertEqual(steps, 3, "10 events in steps of 4")
    }

    /// A replay that reaches the events of its own turn (not committed yet) sends them too,
    /// and goes live; nothing of the turn is missed or sent twice.
    func testAReplayCatchesUpWithTheEventsOfItsOwnTurn() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        h.ok(c, ["type": "ask", "question": .object(h.question())])
        let g = h.connect(uid: 1)
        // One turn: the guardian's hello (a replay from 0), then a question asked after it.
        h.helloInTurn(g, "g1", session: "s", resume: 0)
        h.core.receive(c, body: (["type": "ask", "id": "a2", "question": .object(h.question())] as JSONObject).encoded, now: h.now)
        h.pump()
        XCTAssertEqual(h.events(g, "question").map { $0["seq"]?.int }, [1, 2])
        XCTAssertFalse(h.core.isReplaying(g))
        h.ok(c, ["type": "ask", "question": .object(h.question())])
        XCTAssertEqual(h.events(g, "question").map { $0["seq"]?.int }, [3], "live afterwards")
    }

    /// Events dropped while every durable session had acknowledged them leave the rest
    /// replayed from the oldest kept, with `gap` (issue: a replay once skipped from 2 to 5).
    func testEventsDroppedAsAcknowledgedAreAGapNeverAHole() throws {
        let store = MemoryStore()
        let h = try CoreHarness(store: store)
        h.standardFamilies()
        let (g, _) = h.login("g1", session: "tab")
        let (c, _) = h.login("c1")
        for _ in 0..<5 { h.ok(c, ["type": "ask", "question": .object(h.question())]) }
        h.send(g, ["type": "ack", "seq": 4])
        h.core.flushCursors()
        h.pump()
        for (member, seq) in try store.prune(
            olderThan: Timestamp(milliseconds: 0), acknowledged: h.core.acknowledgedByAllSessions(), settledThrough: .max, limit: 100
        ).through {
            h.core.eventsDropped(member: member, through: seq)
        }
        XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 10).map(\.seq), [5])
        let (late, w) = h.login("g1", session: "new", resume: 1)
        XCTAssertEqual(w["gap"]?.bool, true)
        XCTAssertEqual(w["cursor"]?.int, 4)
        XCTAssertEqual(h.events(late, "question").map { $0["seq"]?.int }, [5])
        let (_, w2) = h.login("g1", session: "newer", resume: 4)
        XCTAssertNil(w2["gap"], "nothing after 4 was dropped")
    }

    /// A session that starts at the head has acknowledged none of the events before it:
    /// they stay for a session that resumes from the start, across a restart too, until
    /// every durable session acknowledged them (§6).
    func testASessionStartingAtTheHeadLetsNoEarlierEventGoUntilItAcknowledgesOne() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("head-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        for store in [MemoryStore(), try SQLiteStore(path: dir.appendingPathComponent("relay.db").path)] as [RelayStore] {
            let h = try CoreHarness(store: store)
            func prune() throws -> [Int64] {
                h.core.flushCursors()
                h.pump()
                let acknowledged = h.core.acknowledgedByAllSessions()
                for _ in 0..<3 {  // a store may take a few steps to reach them
                    let step = try store.prune(
                        olderThan: Timestamp(milliseconds: 0), acknowledged: acknowledged, settledThrough: .max, limit: 100)
                    for (member, seq) in step.through { h.core.eventsDropped(member: member, through: seq) }
                }
                return try store.events(member: "g1", after: 0, limit: 10).map(\.seq)
            }
            h.standardFamilies()
            let (c, _) = h.login("c1")
            for _ in 0..<3 { h.ok(c, ["type": "ask", "question": .object(h.question())]) }
            let (tab, w) = h.login("g1", session: "tab")
            XCTAssertEqual(w["cursor"]?.int, 3, "a new session starts at the head")
            XCTAssertEqual(try prune(), [1, 2, 3], "\(store): not acknowledged by tab")
            h.send(tab, ["type": "ack", "seq": 2])  // below its cursor: changes nothing (§6)
            XCTAssertEqual(try prune(), [1, 2, 3])
            try h.restart()
            XCTAssertEqual(try prune(), [1, 2, 3], "\(store): as stored")

            let (phone, w2) = h.login("g1", session: "phone", resume: 0)
            XCTAssertNil(w2["gap"])
            XCTAssertEqual(h.events(phone, "question").map { $0["seq"]?.int }, [1, 2, 3])
            let (again, w3) = h.login("g1", session: "tab", resume: 1)
            XCTAssertEqual(w3["cursor"]?.int, 1, "replayed from where the client says")
            XCTAssertEqual(h.events(again, "question").map { $0["seq"]?.int }, [2, 3])
            h.ok(h.login("c1").0, ["type": "ask", "question": .object(h.question())])
            h.send(phone, ["type": "ack", "seq": 4])
            XCTAssertEqual(try prune(), [1, 2, 3, 4], "\(store): tab acknowledged nothing by resuming below its cursor")
            h.send(again, ["type": "ack", "seq": 3])
            XCTAssertEqual(try prune(), [4], "\(store): acknowledged by both through 3")
        }
    }

    /// Three questions of c1, and g1 in the middle of a replay of them from the start:
    /// the harness, g1's connection, and the events the store holds for it.
    private func guardianReplayingThreeQuestions() throws -> (CoreHarness, ConnectionID, [EventRecord]) {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        for _ in 0..<3 { h.ok(c, ["type": "ask", "question": .object(h.question())]) }
        let g = h.connect(uid: 1)
        h.helloInTurn(g, "g1", session: "s", resume: 0)
        return (h, g, try h.store.events(member: "g1", after: 0, limit: 10))
    }

    /// A replay that meets a hole in what the store gives never goes live as if it had
    /// caught up: the connection is told and closed, and the reason is given for the log.
    func testAHoleInTheStoredEventsEndsTheReplay() throws {
        let (h, g, stored) = try guardianReplayingThreeQuestions()
        let broken = h.core.continueReplay(g, stored: stored.filter { $0.seq != 2 }, limit: 10)
        XCTAssertTrue(broken?.contains("event 2 of g1") ?? false, broken ?? "no reason")
        let frames = h.core.takeOutputs()
        XCTAssertTrue(frames.contains(.close(g, .storeFailed)))
        XCTAssertFalse(h.core.isOpen(g))
    }

    /// The oldest events missing where a replay starts were dropped while it ran: the
    /// connection is closed, and the session, connecting again, is told of the gap.
    func testOldestEventsDroppedWhileAReplayRunsAreAGapOnTheNextHello() throws {
        let (h, g, stored) = try guardianReplayingThreeQuestions()
        XCTAssertNil(h.core.continueReplay(g, stored: stored.filter { $0.seq > 2 }, limit: 10), "not damage: nothing to log")
        XCTAssertTrue(h.core.takeOutputs().contains(.close(g, .eventsDropped)))
        let (again, w) = h.login("g1", session: "s", resume: 0)
        XCTAssertEqual(w["gap"]?.bool, true)
        XCTAssertEqual(w["cursor"]?.int, 2)
        XCTAssertEqual(h.events(again, "question").map { $0["seq"]?.int }, [3])
    }

    /// A store that cannot be read for a replay: the session is told and closed, not taken live.
    func testAReplayTheStoreCannotReadEndsTheConnection() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        h.ok(c, ["type": "ask", "question": .object(h.question())])
        let g = h.connect(uid: 1)
        h.helloInTurn(g, "g1", session: "s", resume: 0)
        h.core.replayFailed(g, "disk I/O error")
        h.pump()
        let frames = h.drain(g)
        XCTAssertEqual(frames.map { $0["type"]?.string }, ["welcome", "error", "closing"])
        XCTAssertEqual(frames[1]["code"]?.string, "internal")
        XCTAssertEqual(h.closed[g], .storeFailed)
    }

    func testGapWhenEventsWereDropped() throws {
        let store = MemoryStore()
        let h = try CoreHarness(store: store)
        h.standardFamilies()
        let (c, _) = h.login("c1")
        for _ in 0..<3 { h.ok(c, ["type": "ask", "question": .object(h.question())]) }
        h.advance(seconds: 10)
        h.ok(c, ["type": "ask", "question": .object(h.question())])
        let step = try store.prune(
            olderThan: Timestamp(milliseconds: h.now.milliseconds - 5000), acknowledged: [:], settledThrough: .max, limit: 100)
        for (member, seq) in step.through {
            h.core.eventsDropped(member: member, through: seq)
        }
        let (g, w) = h.login("g1", session: "late", resume: 0)
        XCTAssertEqual(w["gap"]?.bool, true)
        XCTAssertEqual(w["cursor"]?.int, 3)
        XCTAssertEqual(h.events(g, "question").map { $0["seq"]?.int }, [4])
    }

    func testNewGuardianGetsPendingQuestions() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        let answered = h.question()
        h.ok(c, ["type": "ask", "question": .object(answered)])
        let (g, _) = h.login("g1")
        h.ok(g, ["type": "answer", "questionId": answered["id"]!, "choice": "approve"])
        let a = h.admin()
        let r = h.ok(a, ["type": "addMember", "family": "fam", "member": "g3", "role": "guardian"])
        h.tokens["g3"] = r["token"]?.string
        let (g3, _) = h.login("g3", session: "s", resume: 0)
        XCTAssertEqual(h.events(g3, "question").map { $0["question"]?["id"] }, [q["id"]])
    }

    func testStateSurvivesARestart() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1", session: "app", subscribe: ["communication"])
        let (g, _) = h.login("g1")
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": "approve"])
        let pending = h.question()
        h.ok(c, ["type": "ask", "question": .object(pending)])
        let seqBefore = h.events(c, "response").first?["seq"]?.int
        try h.restart()
        let (c2, w) = h.login("c1", session: "app")
        XCTAssertEqual(h.events(c2, "response").first?["seq"]?.int, seqBefore, "same seq after a restart")
        XCTAssertEqual(w["head"]?.int, seqBefore! + 1)
        let (g2, _) = h.login("g1")
        XCTAssertEqual(h.ok(g2, ["type": "pending"])["questions"]?.array?.map { $0["id"] }, [pending["id"]])
        let (c3, _) = h.login("c1")
        XCTAssertEqual(
            h.ok(c3, ["type": "knownHandles", "handles": [.object(["value": "+15550100", "kind": "phoneNumber"])]])["known"]?.array?.count,
            1)
    }
}

final class AckTests: XCTestCase {
    func testAckAboveHeadCountsAsHeadAndNeverMovesBack() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (g, _) = h.login("g1", session: "tab")
        let (c, _) = h.login("c1")
        h.ok(c, ["type": "ask", "question": .object(h.question())])
        h.ok(c, ["type": "ask", "question": .object(h.question())])
        h.sendRaw(g, Array(#"{"type":"ack","seq":18446744073709551616}"#.utf8))  // beyond 64 bits: above the head too
        h.send(g, ["type": "ack", "seq": 1])
        XCTAssertTrue(h.drain(g).filter { $0["type"]?.string == "error" }.isEmpty, "no ack is refused")
        h.core.flushCursors()
        h.core.disconnected(g)
        let (_, w) = h.login("g1", session: "tab")
        XCTAssertEqual(w["cursor"]?.int, 2, "an ack above the head is the head; a lower one changes nothing")
        let (e, _) = h.login("g1")
        h.send(e, ["type": "ack", "seq": 1])
        XCTAssertTrue(h.drain(e).isEmpty, "an ack on an ephemeral session is ignored")
    }

    /// g1 on durable session "tab" with one event (a question) to acknowledge, committed.
    private func guardianWithOneEvent() throws -> (MemoryStore, CoreHarness, guardian: ConnectionID) {
        let store = MemoryStore()
        let h = try CoreHarness(store: store)
        h.standardFamilies()
        let (g, _) = h.login("g1", session: "tab")
        let (c, _) = h.login("c1")
        h.ok(c, ["type": "ask", "question": .object(h.question())])
        return (store, h, g)
    }

    func testCursorsAreStoredLazilyWhenFlushed() throws {
        let (store, h, g) = try guardianWithOneEvent()
        let commits = store.commits
        h.send(g, ["type": "ack", "seq": 1])
        XCTAssertEqual(store.commits, commits, "an ack alone writes nothing")
        h.core.flushCursors()
        XCTAssertEqual(h.core.takeChanges(), [.session(SessionRecord(member: "g1", name: "tab", cursor: 1, topics: []))])
    }

    func testACursorMovedBeforeItsMemberIsRemovedIsNotWrittenBack() throws {
        let (store, h, g) = try guardianWithOneEvent()
        h.send(g, ["type": "ack", "seq": 1])
        h.ok(h.admin(), ["type": "removeMember", "member": "g1"])
        h.core.flushCursors()
        try store.commit(h.core.takeChanges())
        XCTAssertEqual(try store.load().sessions.filter { $0.member == "g1" }.map(\.name), [], "the removed member's sessions stay gone")
    }
}

/// The same promise with the SQLite store: after every turn, what it would load on a
/// restart is what the core holds (checked by the harness at each pump).
final class SQLiteTurnTests: XCTestCase {
    func testEveryTurnIsWhatARestartLoadsFromSQLiteToo() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("turns-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        // Its questions added to the lookup tables, and the oldest forgotten, after every turn.
        let store = try SQLiteStore(path: dir.appendingPathComponent("relay.db").path, questionIndexSeconds: 0)
        let h = try CoreHarness(store: store, kept: QuestionsKept(count: 3)) { $0.maxSessionsPerMember = 2 }
        h.standardFamilies()
        let (c, _) = h.login("c1", session: "app", subscribe: ["communication"])
        let (g, _) = h.login("g1", session: "tab")
        var asked: [JSONObject] = []
        for i in 0..<5 {
            let q = h.question(handles: ["+1 555 01\(i)"], expiresIn: i == 4 ? 1 : 3600)
            asked.append(q)
            h.ok(c, ["type": "ask", "question": .object(q)])
        }
        h.ok(g, ["type": "answer", "questionId": asked[0]["id"]!, "choice": "approve"])
        h.ok(c, ["type": "cancel", "questionId": asked[1]["id"]!])
        h.ok(c, ["type": "ask", "question": .object(asked[1])])  // asked again
        h.advance(seconds: 2)  // the last one expires
        h.send(g, ["type": "ack", "seq": 3])
        h.core.flushCursors()
        h.pump()
        h.ok(g, ["type": "addKnownHandles", "child": "c1", "handles": [.object(["value": "kim@example.com", "kind": "emailAddress"])]])
        h.ok(g, ["type": "setLimits", "child": "c1", "enabled": false])
        h.core.disconnected(g)
        let (phone, _) = h.login("g1", session: "phone")
        h.core.disconnected(phone)
        _ = h.login("g1", session: "laptop")  // past the limit: the least recently used goes
        let a = h.admin()
        h.ok(a, ["type": "rotateToken", "member": "g2"])
        h.ok(a, ["type": "removeMember", "member": "c2"])
        try h.restart()
        let (g2, _) = h.login("g1")
        XCTAssertEqual(h.ok(g2, ["type": "pending"])["questions"]?.array?.count, 3)
        let (c2, _) = h.login("c1")
        XCTAssertEqual(h.ok(c2, ["type": "questions"])["questions"]?.array?.count, 3, "its two finished ones forgotten")
        XCTAssertEqual(try SQLiteStore.check(databaseAt: dir.appendingPathComponent("relay.db").path), [])
    }
}
