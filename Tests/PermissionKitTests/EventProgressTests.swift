// What the client records as processed, and so acknowledges: past the holes a stream has
// (topics the session does not follow, events dropped before a replay with `gap`), never
// past an event received and not processed yet; a response the app still has is not
// handed to it again when the relay replays it after a reconnect; and a connection the
// relay closes right after its welcome is not retried in a loop, nor a request larger
// than the relay takes resent, nor a cancelled task's request sent.

import Foundation
@testable import PermissionKit
import RelayProtocol
import Synchronization
import XCTest

final class EventProgressTests: XCTestCase {
    private func stateFile() -> String {
        let path = NSTemporaryDirectory() + "progress-\(UUID().uuidString).state"
        addTeardownBlock { try? FileManager.default.removeItem(atPath: path) }
        return path
    }

    /// Seq 1 is of a topic this session does not follow: the relay never sends it.
    func testASeqThatNeverCameBelowOneReceivedIsNoHole() {
        let p = EventProgress(path: nil)
        p.welcome(head: 0, cursor: 0, gap: false)
        p.received(2)
        XCTAssertEqual(p.markDone(2), 2, "acknowledged past the seq filtered out")
    }

    func testTheMarkWaitsForWhatWasReceivedAndNotProcessed() {
        let p = EventProgress(path: nil)
        p.welcome(head: 0, cursor: 0, gap: false)
        for seq: Int64 in [1, 3, 4] { p.received(seq) }
        XCTAssertNil(p.markDone(3), "1 came and is not processed yet")
        XCTAssertEqual(p.markDone(1), 3, "2 never came: not waited for")
        XCTAssertEqual(p.markDone(4), 4)
        XCTAssertTrue(p.isDone(2))
    }

    /// Events after the app's mark were dropped: the replay starts past them, with `gap`.
    func testAGapMovesTheMarkToTheCursor() {
        let path = stateFile()
        let p = EventProgress(path: path)
        p.welcome(head: 3, cursor: 3, gap: false)
        p.welcome(head: 8, cursor: 7, gap: true)
        XCTAssertEqual(p.mark, 7)
        p.received(8)
        XCTAssertEqual(p.markDone(8), 8)
        XCTAssertEqual(EventProgress(path: path).mark, 8, "as stored for the next run")
    }

    /// A question asked here is awaited until its closing is processed, across runs; a gap
    /// makes the app unsure of it until the relay has been asked; a closing recovered then
    /// (a seq below 1) is processed without moving the mark.
    func testAnAwaitedQuestionOutlivesAGapUntilItsClosingIsProcessed() {
        let path = stateFile()
        let first = EventProgress(path: path)
        first.welcome(head: 3, cursor: 3, gap: false)
        first.awaitClosing(of: "Q")
        XCTAssertFalse(first.unsure)
        first.welcome(head: 9, cursor: 8, gap: true)
        let next = EventProgress(path: path)
        XCTAssertEqual(next.awaiting, ["Q"])
        XCTAssertTrue(next.unsure, "as stored for the next run")
        XCTAssertNil(next.markDone(-1, closing: "Q"))
        XCTAssertEqual(next.mark, 8)
        XCTAssertEqual(EventProgress(path: path).awaiting, [])
        next.checked(gone: [], sure: false, gaps: next.gaps)
        XCTAssertFalse(EventProgress(path: path).unsure, "nothing is awaited any more")
        next.awaitClosing(of: "R")
        next.awaitClosing(of: "S")
        next.checked(gone: ["R"], sure: false, gaps: next.gaps)
        XCTAssertEqual(EventProgress(path: path).awaiting, ["S"], "the relay no longer has R")
        XCTAssertTrue(EventProgress(path: path).unsure)
        // A check begun before another gap does not settle it.
        let gaps = next.gaps
        next.welcome(head: 12, cursor: 11, gap: true)
        next.checked(gone: [], sure: true, gaps: gaps)
        XCTAssertTrue(EventProgress(path: path).unsure)
        next.checked(gone: [], sure: true, gaps: next.gaps)
        XCTAssertFalse(EventProgress(path: path).unsure)
        // A relay whose stream restarted below the mark (its data reset): unsure too.
        next.welcome(head: 2, cursor: 0, gap: false)
        XCTAssertTrue(EventProgress(path: path).unsure)
        next.received(1)
        XCTAssertEqual(next.markDone(1, closing: "S"), 1)
        XCTAssertEqual(EventProgress(path: path).awaiting, [])
    }

    /// A question asked again while the closing of its last asking is in hand: that closing,
    /// processed (in this run or the next), leaves the new asking awaited; one a gap dropped
    /// never comes, nor does one recovered in an earlier run.
    func testTheLastAskingsClosingLeavesTheNewAskingAwaited() {
        let path = stateFile()
        let first = EventProgress(path: path)
        first.welcome(head: 0, cursor: 0, gap: false)
        first.awaitClosing(of: "Q")
        first.received(1)  // its cancellation, not processed
        first.askedAgain("Q", closingInHand: 1)
        let next = EventProgress(path: path)
        next.welcome(head: 1, cursor: 0, gap: false)
        next.received(1)  // replayed
        XCTAssertEqual(next.markDone(1, closing: "Q"), 1)
        XCTAssertEqual(EventProgress(path: path).awaiting, ["Q"], "the new asking is awaited")
        next.received(2)
        XCTAssertEqual(next.markDone(2, closing: "Q"), 2)
        XCTAssertEqual(EventProgress(path: path).awaiting, [])

        next.awaitClosing(of: "R")
        next.received(3)
        next.askedAgain("R", closingInHand: 3)
        next.awaitClosing(of: "S")
        next.askedAgain("S", closingInHand: -1)  // a recovered closing
        next.welcome(head: 9, cursor: 8, gap: true)  // 3 dropped
        next.received(9)
        XCTAssertEqual(next.markDone(9, closing: "R"), 9)
        let last = EventProgress(path: path)
        XCTAssertEqual(last.awaiting, ["S"], "R's new asking closed")
        XCTAssertNil(last.markDone(-1, closing: "S"))
        XCTAssertEqual(EventProgress(path: path).awaiting, [], "no closing recovered in an earlier run is in hand")

        // A closing in hand as a gap passes it is still to be processed: its mark stays.
        last.welcome(head: 20, cursor: 20, gap: false)
        last.awaitClosing(of: "T")
        last.received(21)
        last.askedAgain("T", closingInHand: 21)
        last.welcome(head: 30, cursor: 29, gap: true)
        XCTAssertNil(last.markDone(21, closing: "T"))
        XCTAssertEqual(EventProgress(path: path).awaiting, ["T"])

        // An ask again that failed: undone before the last closing is processed, the question
        // is awaited for that closing; after, it is awaited no more.
        last.received(30)
        last.askedAgain("T", closingInHand: 30)
        last.undoAskAgain("T", closingInHand: 30)
        XCTAssertEqual(EventProgress(path: path).awaiting, ["T"])
        last.askedAgain("T", closingInHand: 30)
        last.markDone(30, closing: "T")
        XCTAssertEqual(EventProgress(path: path).awaiting, ["T"], "the ask again still under way")
        last.undoAskAgain("T", closingInHand: 30)
        XCTAssertEqual(EventProgress(path: path).awaiting, [])
    }

    /// What a run processed above an event still open is kept for the next run, and the mark
    /// of the next run passes it once the open one is done.
    func testProcessedAboveTheMarkSurvivesARestart() {
        let path = stateFile()
        let first = EventProgress(path: path)
        first.welcome(head: 0, cursor: 0, gap: false)
        first.received(1)
        first.received(2)
        XCTAssertNil(first.markDone(2))
        let next = EventProgress(path: path)
        XCTAssertEqual(next.mark, 0)
        XCTAssertTrue(next.isDone(2))
        next.welcome(head: 2, cursor: 0, gap: false)
        next.received(1)
        next.received(2)  // replayed: done already
        XCTAssertEqual(next.markDone(1), 2)
    }

    /// A backup restored on the relay: its head went back below seqs this app processed
    /// (above an event it never took), and the relay gives those seqs to new events.
    func testSeqsProcessedBeyondARestoredHeadAreNewEventsAfterIt() {
        let path = stateFile()
        let first = EventProgress(path: path)
        first.welcome(head: 0, cursor: 0, gap: false)
        for seq: Int64 in 1...5 { first.received(seq) }
        for seq: Int64 in 2...5 { XCTAssertNil(first.markDone(seq)) }  // 1 stays untaken
        let next = EventProgress(path: path)
        next.welcome(head: 1, cursor: 0, gap: false)  // the backup's head
        XCTAssertFalse(next.isDone(2), "seq 2 is a new event now")
        next.received(1)
        next.received(2)
        XCTAssertNil(next.markDone(2))
        XCTAssertEqual(next.markDone(1), 2)
        XCTAssertFalse(EventProgress(path: path).isDone(3), "as stored for the next run")
    }

    /// The relay's data was reset (or a backup restored below the app's mark) while the app
    /// held events of its old stream: processed later, they do not count for the new
    /// stream's events, which reuse their seqs.
    func testEventsInHandFromAStreamTheRelayNoLongerHasMoveNothingWhenProcessed() {
        for restored in [false, true] {
            let path = stateFile()
            let p = EventProgress(path: path)
            p.welcome(head: 0, cursor: 0, gap: false)
            for seq: Int64 in 1...6 { p.received(seq) }
            for seq: Int64 in 1...3 { XCTAssertEqual(p.markDone(seq), seq) }
            if restored {
                p.welcome(head: 3, cursor: 3, gap: false)  // a backup whose stream ends at 3
            } else {
                p.welcome(head: 0, cursor: 0, gap: false)  // a relay whose data was reset
            }
            XCTAssertNil(p.markDone(6), "an event of the old stream (\(restored))")
            XCTAssertFalse(p.isDone(4), "seq 4 is the new stream's (\(restored))")
            XCTAssertFalse(EventProgress(path: path).isDone(4), "as stored for the next run (\(restored))")
            p.received(4)  // the new stream's, while the old stream's 4 is in hand
            XCTAssertNil(p.markDone(4), "the old stream's, which came first (\(restored))")
            XCTAssertNil(p.markDone(5), "of the old stream too (\(restored))")
            XCTAssertFalse(p.isDone(4), "the new 4 is still to be processed (\(restored))")
            XCTAssertEqual(p.markDone(4), 4, "(\(restored))")
            p.received(6)
            XCTAssertFalse(p.isDone(6), "the new event with seq 6 (\(restored))")
            XCTAssertEqual(p.markDone(6), 6, "(\(restored))")
        }
    }

    /// A center with a durable session on a relay the test plays (welcomed; acknowledging at
    /// once, reconnecting within 10 ms), whose app's loop hands on (and to `onHanded`) each
    /// response's question and holds it until released: the app shows it, and waits for
    /// the user.
    private func appHoldingEachResponse(onHanded: @escaping @Sendable (UUID) -> Void = { _ in }) throws -> (
        ScriptedRelay, AskCenter, handed: AsyncStream<UUID>, releasing: AsyncStream<Void>.Continuation, loop: Task<Void, Never>
    ) {
        let relay = try ScriptedRelay()
        var config = RelayConfiguration(
            socketPath: relay.path, member: "c0", token: "t", session: "app", stateFile: stateFile())
        config.ackDelay = .zero
        config.reconnectDelay = .milliseconds(10)
        let center = AskCenter(configuration: config)
        let responses = center.responses(for: CommunicationTopic.self)
        try relay.acceptAndWelcome()
        let (handed, next) = AsyncStream<UUID>.makeStream()
        let (release, releasing) = AsyncStream<Void>.makeStream()
        let loop = Task {
            var releases = release.makeAsyncIterator()
            for await r in responses {
                next.yield(r.question.id)
                onHanded(r.question.id)
                _ = await releases.next()
            }
        }
        return (relay, center, handed, releasing, loop)
    }

    /// A question asked again while the closing of its last asking was in hand, and then a
    /// backup restored below that closing: a closing of the new stream with its seq, in the
    /// next run, is the new asking's.
    func testARestoreBelowAClosingInHandLetsItsReaskMarkGo() {
        let path = stateFile()
        let p = EventProgress(path: path)
        p.welcome(head: 0, cursor: 0, gap: false)
        for seq: Int64 in 1...5 { p.received(seq) }
        for seq: Int64 in 1...3 { XCTAssertEqual(p.markDone(seq), seq) }
        p.awaitClosing(of: "Q")
        p.askedAgain("Q", closingInHand: 5)
        p.welcome(head: 3, cursor: 3, gap: false)  // a backup whose stream ends at 3
        let next = EventProgress(path: path)
        next.welcome(head: 3, cursor: 3, gap: false)
        next.received(5)
        next.markDone(5, closing: "Q")
        XCTAssertEqual(next.awaiting, [], "the new stream's closing of Q")
    }

    /// The relay's data is reset while the app's loop has a response: the new stream's
    /// response with the same seq is handed once that one is done, not taken for a replay.
    func testANewResponseWithTheSeqOfOneInHandFromBeforeAResetIsHandedAfterIt() async throws {
        let (done, inHand, new) = (UUID(), UUID(), UUID())
        let newHanded = expectation(description: "the new stream's response handed")
        let (relay, center, handed, releasing, loop) = try appHoldingEachResponse { if $0 == new { newHanded.fulfill() } }
        var seen = handed.makeAsyncIterator()
        relay.send(Self.response(seq: 1, question: done))
        let first = await seen.next()
        XCTAssertEqual(first, done)
        relay.send(Self.response(seq: 2, question: inHand))
        releasing.yield()  // 1 is processed (the mark is 1); 2 is in the loop's hands
        let second = await seen.next()
        XCTAssertEqual(second, inHand)
        relay.drop()
        let hello = try relay.acceptAndWelcome(head: 0, cursor: 0)  // a relay whose data was reset
        XCTAssertEqual(hello["resume"]?.int, 1)
        relay.send(Self.response(seq: 2, question: new))  // the new stream's 1 is of another topic
        relay.send(try JSON.parse(#"{"type":"limitsChanged","seq":3,"enabled":true}"#).object!)
        // Acknowledged up to 1 (3 is done, 2 is not): both came before the old 2 is let go.
        var acked: Int64?
        while acked == nil, let (frame, _) = relay.nextFrame(within: .seconds(10)) {
            if frame["type"]?.string == "ack" { acked = frame["seq"]?.int }
        }
        XCTAssertEqual(acked, 1)
        releasing.yield()
        await fulfillment(of: [newHanded], timeout: 10)
        releasing.yield()
        loop.cancel()
        await center.close()
    }

    /// The relay replays a response the app's loop still has (it was not acknowledged): the
    /// loop is not handed it a second time.
    func testAResponseInHandIsNotHandedAgainWhenReplayedAfterAReconnect() async throws {
        let (first, second) = (UUID(), UUID())
        let (relay, center, handed, releasing, loop) = try appHoldingEachResponse()
        var seen = handed.makeAsyncIterator()
        relay.send(Self.response(seq: 1, question: first))
        let firstHanded = await seen.next()
        XCTAssertEqual(firstHanded, first)
        relay.drop()  // the relay restarts, say
        let hello = try relay.acceptAndWelcome(head: 2, cursor: 0)
        XCTAssertEqual(hello["resume"]?.int, 0, "nothing processed yet")
        relay.send(Self.response(seq: 1, question: first))  // replayed: never acknowledged
        relay.send(Self.response(seq: 2, question: second))
        releasing.yield()
        let afterIt = await seen.next()
        XCTAssertEqual(afterIt, second, "the replayed response was handed to the app a second time")
        releasing.yield()
        loop.cancel()
        await center.close()
    }

    /// A relay that closes each connection right after its welcome is not connected to again
    /// at once, in a loop, but after a pause that grows.
    func testAConnectionClosedRightAfterItsWelcomeIsNotRetriedAtOnce() throws {
        let relay = try ScriptedRelay()
        var config = RelayConfiguration(socketPath: relay.path, member: "c0", token: "t", session: "app")
        config.reconnectDelay = .milliseconds(200)
        let connection = RelayConnection(config: config, resumePoint: { nil }, setup: { [] }, onEvent: { _ in })
        connection.start()
        defer { connection.close() }
        var accepted: [ContinuousClock.Instant] = []
        for _ in 0..<3 {
            try relay.acceptAndWelcome()
            accepted.append(.now)
            relay.drop()
        }
        XCTAssertGreaterThanOrEqual(accepted[1] - accepted[0], .milliseconds(150), "the delay, less its jitter")
        XCTAssertGreaterThanOrEqual(accepted[2] - accepted[1], .milliseconds(300), "twice that")
    }

    /// A request larger than the relay's maxFrameBytes fails at once with frameTooLarge; it
    /// is not sent (the relay would close the connection, and the resend would again).
    func testARequestLargerThanTheRelayTakesFailsAtOnce() async throws {
        let (connection, relay) = try await readyConnection()
        let pad: JSONObject = ["pad": .string(String(repeating: "x", count: 2 << 20))]
        let huge = try await connection.request(["type": "ask", "question": .object(pad)])
        XCTAssertEqual(huge["code"]?.string, "frameTooLarge")
        XCTAssertTrue(huge["message"]?.string?.contains("the relay takes frames of 1048576 at most") ?? false, "\(huge)")
        async let small = connection.request(["type": "limits"])
        let (next, _) = try XCTUnwrap(relay.nextFrame(within: .seconds(10)))
        XCTAssertEqual(next["type"]?.string, "limits", "the large one was never sent")
        relay.send(["type": "ok", "re": next["id"] ?? .null, "enabled": true])
        _ = try await small
    }

    /// A guardian's app started before the relay answers: the questions already pending
    /// reach its stream once the relay does.
    func testPendingQuestionsReachAGuardiansStreamOpenedBeforeTheRelayAnswered() async throws {
        let relay = try ScriptedRelay()
        var config = RelayConfiguration(socketPath: relay.path, member: "g0", token: "t", session: "view")
        config.requestTimeout = .milliseconds(300)
        let center = GuardianCenter(configuration: config)
        var questions = center.questions().makeAsyncIterator()
        try await Task.sleep(for: .milliseconds(700))  // its first listing timed out: time is what is waited for
        try relay.acceptAndWelcome()
        let waiting = UUID()
        var listed = false
        while !listed, let (frame, _) = relay.nextFrame(within: .seconds(10)) {
            guard let id = frame["id"] else { continue }
            listed = frame["type"]?.string == "pending"
            let question = Self.response(seq: 1, question: waiting)["question"] ?? .null
            relay.send(["type": "ok", "re": id, "questions": listed ? [question] : []])
        }
        XCTAssertTrue(listed, "the pending questions were never asked for again")
        if listed {
            let first = await questions.next()
            XCTAssertEqual(first?.id, waiting)
        }
        await center.close()
    }

    /// Every request of a connection has an id of its own (§2), its subscriptions too.
    func testEveryRequestOfAConnectionHasAnIdOfItsOwn() async throws {
        let subscribe: JSONObject = ["type": "subscribe", "id": "subscribe", "topics": ["communication"]]
        let (connection, relay) = try await readyConnection(setup: [subscribe])
        connection.sendLater(subscribe)  // the subscription grown, twice
        connection.sendLater(subscribe)
        async let limits = connection.request(["type": "limits"])
        var ids: [String] = []
        while let (frame, _) = relay.nextFrame(within: .seconds(10)) {
            ids.append(frame["id"]?.string ?? "none")
            relay.send(["type": "ok", "re": frame["id"] ?? .null])
            if frame["type"]?.string == "limits" { break }
        }
        _ = try await limits
        XCTAssertEqual(ids.count, 4, "\(ids)")
        XCTAssertEqual(Set(ids).count, ids.count, "\(ids)")
    }

    /// A request of a task cancelled already is not sent.
    func testARequestOfATaskCancelledAlreadyIsNotSent() async throws {
        let (connection, relay) = try await readyConnection()
        let cancelled = Task { () -> (any Error)? in
            withUnsafeCurrentTask { $0?.cancel() }
            do {
                _ = try await connection.request(["type": "cancel", "questionId": "6F9619FF-8B86-D011-B42D-00CF4FC964FF"])
                return nil
            } catch { return error }
        }
        let thrown = await cancelled.value
        XCTAssertTrue(thrown is CancellationError, "\(String(describing: thrown))")
        async let limits = connection.request(["type": "limits"])
        let (next, _) = try XCTUnwrap(relay.nextFrame(within: .seconds(10)))
        XCTAssertEqual(next["type"]?.string, "limits", "the cancelled task's request was sent")
        relay.send(["type": "ok", "re": next["id"] ?? .null, "enabled": true])
        _ = try await limits
    }

    /// A connection past its welcome, with `setup` sent after it, and the relay it talks to.
    private func readyConnection(setup: [JSONObject] = []) async throws -> (RelayConnection, ScriptedRelay) {
        let relay = try ScriptedRelay()
        let config = RelayConfiguration(socketPath: relay.path, member: "c0", token: "t", session: "app")
        let connection = RelayConnection(config: config, resumePoint: { nil }, setup: { setup }, onEvent: { _ in })
        connection.start()
        addTeardownBlock { connection.close() }
        try relay.acceptAndWelcome()
        for await state in connection.states() where state == .ready { break }
        return (connection, relay)
    }

    static func response(seq: Int64, question: UUID) -> JSONObject {
        let text = """
            {"type":"response","seq":\(seq),"question":{"id":"\(question.uuidString)","topic":{"kind":"communication",
            "personInformation":[{"handle":{"value":"+15550100","kind":"phoneNumber"}}]},
            "choices":[{"id":"approve","title":"Approve","answer":"approval"},{"id":"decline","title":"Decline","answer":"denial"}],
            "defaultChoice":"decline","child":"c0","status":"answered","attempt":1,"createdAt":"2026-01-01T00:00:00Z"},
            "choice":{"id":"approve","title":"Approve","answer":"approval"},"guardian":"sam","answeredAt":"2026-01-01T00:00:01Z"}
            """
        return try! JSON.parse(text).object!
    }
}
