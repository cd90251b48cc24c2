// The client library against the real relay: a full cycle, crashes on both sides,
// a relay that is down, and an app restarted before its response was delivered.

import Foundation
import PermissionKit
import Synchronization
import XCTest

final class PermissionKitTests: XCTestCase {
    private func config(
        _ relay: RelayProcess, _ member: String, _ tokens: [String: String], session: String = "app",
        state: String? = nil, timeout: Duration = .seconds(10)
    ) -> RelayConfiguration {
        var c = RelayConfiguration(socketPath: relay.socket, member: member, token: tokens[member]!, session: session, stateFile: state)
        c.requestTimeout = timeout
        c.maxReconnectDelay = .milliseconds(200)
        return c
    }

    /// A relay with one family (`c0`, `g0`), where the child's app keeps its state, and the
    /// guardian's center.
    private func family() throws -> (relay: RelayProcess, tokens: [String: String], state: String, guardian: GuardianCenter) {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let state = relay.dir.appendingPathComponent("child.state").path
        return (relay, tokens, state, GuardianCenter(configuration: config(relay, "g0", tokens)))
    }

    /// How long an ask took to fail with `notAvailable`, as it must with the relay down or hung.
    private func timeToFail(_ center: AskCenter, file: StaticString = #filePath, line: UInt = #line) async -> Duration {
        let started = ContinuousClock.now
        do {
            try await center.ask(contact())
            XCTFail("the relay cannot answer", file: file, line: line)
        } catch {
            XCTAssertEqual(error as? AskError, .notAvailable, file: file, line: line)
        }
        return ContinuousClock.now - started
    }

    private func contact() -> PermissionQuestion<CommunicationTopic> {
        PermissionQuestion(handle: CommunicationHandle(value: "+1 555 \(Int.random(in: 1000...9999))", kind: .phoneNumber))
    }

    func testFullCycleThroughTheLibrary() async throws {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let child = AskCenter(configuration: config(relay, "c0", tokens))
        let guardian = GuardianCenter(configuration: config(relay, "g0", tokens))
        let limits = CommunicationLimits(center: child)
        var responses = child.responses(for: CommunicationTopic.self).makeAsyncIterator()
        var updates = limits.updates.makeAsyncIterator()  // Apple's earlier spelling of the same
        var incoming = guardian.questions().makeAsyncIterator()
        let question = contact()
        let receipt = try await child.submit(question)
        XCTAssertEqual(receipt.status, "pending")
        let seen = try await next(&incoming)
        XCTAssertEqual(seen.id, question.id)
        XCTAssertEqual(seen.child, "c0")
        try await guardian.answer(seen, with: .approve)
        let response = try await next(&responses)
        XCTAssertEqual(response.question.id, question.id)
        XCTAssertEqual(response.choice, .approve)
        XCTAssertEqual(response.guardian, "g0")
        let update = try await next(&updates)
        XCTAssertEqual(update.question.id, question.id)
        XCTAssertEqual(update.choice, .approve)
        let handle = question.topic.personInformation[0].handle
        let known = await limits.isKnownHandle(handle)
        XCTAssertTrue(known)
        let state = try await child.state(for: handle)
        XCTAssertEqual(state, .approved(until: nil))
        do {
            try await guardian.answer(seen, with: .decline)
            XCTFail("a second answer must fail")
        } catch let e as RelayError {
            XCTAssertEqual(e.code, "alreadyAnswered")
        }
    }

    /// A known handle's state says until when the relay keeps it known: the timed approval
    /// that ends last, whichever question came last, and no end once a guardian makes it
    /// known for good.
    func testAHandlesStateEndsWhenTheRelayForgetsIt() async throws {
        let (relay, tokens, _, guardian) = try family()
        let child = AskCenter(configuration: config(relay, "c0", tokens))
        let handle = CommunicationHandle(value: "+1 555 0142", kind: .phoneNumber)
        let hour = PermissionChoice(id: "hour", title: "An hour", answer: .approval, durationSeconds: 3600)
        let minute = PermissionChoice(id: "minute", title: "A minute", answer: .approval, durationSeconds: 60)
        var responses = child.responses(for: CommunicationTopic.self).makeAsyncIterator()
        /// Until when `choice` makes the handle known, as its response says.
        func approve(with choice: PermissionChoice) async throws -> Date {
            let q = PermissionQuestion(
                topic: CommunicationTopic(personInformation: [.init(handle: handle)]), choices: [hour, minute, .decline])
            try await child.ask(q)
            try await guardian.answer(q.id, with: choice.id)
            let r = try await next(&responses)
            XCTAssertEqual(r.choice, choice)
            return r.answeredAt.addingTimeInterval(Double(choice.durationSeconds ?? 0))
        }
        func until() async throws -> Date? {
            guard case .approved(let until) = try await child.state(for: handle) else {
                XCTFail("the handle is known")
                return nil
            }
            return until
        }
        let end = try await approve(with: hour)
        var known = try await until()
        XCTAssertEqual(known?.timeIntervalSince1970 ?? 0, end.timeIntervalSince1970, accuracy: 0.001)
        _ = try await approve(with: minute)
        known = try await until()
        XCTAssertEqual(known?.timeIntervalSince1970 ?? 0, end.timeIntervalSince1970, accuracy: 0.001, "the hour's end")
        _ = try await guardian.addKnownHandles([handle], for: "c0")
        known = try await until()
        XCTAssertNil(known, "known for good")
    }

    func testPendingQuestionsTooLargeForOneReplyAllReachTheGuardian() async throws {
        // Questions with 200 KiB avatars, more of them than the relay lets a connection hold
        // unsent: in one reply, the relay dropped the guardian asking, at every try.
        let relay = try RelayProcess(flags: ["--ask-rate-limit", "0", "--max-output-bytes", "\(4 << 20)"])
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let child = AskCenter(configuration: config(relay, "c0", tokens))
        var asked: [UUID] = []
        for i in 0..<20 {
            let person = CommunicationTopic.PersonInformation(
                handle: CommunicationHandle(value: "+1 555 01\(10 + i)", kind: .phoneNumber),
                avatarImage: Data(repeating: UInt8(i), count: 200 << 10))
            let q = PermissionQuestion(topic: CommunicationTopic(personInformation: [person], actions: [.message]))
            _ = try await child.submit(q)
            asked.append(q.id)
        }
        let guardian = GuardianCenter(configuration: config(relay, "g0", tokens))
        let pending = try await guardian.pending()
        XCTAssertEqual(pending.map(\.id), asked, "every one, oldest first")
        guard case .communication(let topic)? = pending.last?.topic else { return XCTFail("a communication question") }
        XCTAssertEqual(topic.personInformation.first?.avatarImage?.count, 200 << 10)
        let history = try await guardian.history(limit: 15)
        XCTAssertEqual(history.map(\.id), Array(asked.reversed().prefix(15)))
        let own = try await child.questions()
        XCTAssertEqual(own.count, 20)
        // The newest question is on the first page of the child's list: one page is enough.
        let admin = try relay.admin()
        let before = try admin.request(["type": "status"])["framesIn"]?.int ?? 0
        let state = try await child.state(for: CommunicationHandle(value: "+1 555 0129", kind: .phoneNumber))
        XCTAssertEqual(state, .pending)
        let after = try admin.request(["type": "status"])["framesIn"]?.int ?? 0
        XCTAssertEqual(after - before, 3, "status, knownHandles and one page of questions")
    }

    func testAskErrorsFromTheRelay() async throws {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let admin = try relay.admin()
        _ = try admin.request(["type": "setLimits", "child": "c0", "enabled": false])
        let child = AskCenter(configuration: config(relay, "c0", tokens))
        do {
            try await child.ask(contact())
            XCTFail("limits are off")
        } catch let e as AskError {
            XCTAssertEqual(e, .communicationLimitsNotEnabled)
        }
        var past = PermissionQuestion(significantAppUpdateTopic: SignificantAppUpdateTopic(description: "v2"))
        past.expirationDate = Date(timeIntervalSinceNow: -60)
        do {
            try await child.ask(past)
            XCTFail("expired question")
        } catch let e as AskError {
            XCTAssertEqual(e, .invalidQuestion)
        }
        _ = try admin.request(["type": "setLimits", "child": "c0", "enabled": true])
        // The relay's reason, which AskError (Apple's cases) cannot carry, is the center's lastError.
        do {
            try await child.ask(PermissionQuestion(handle: CommunicationHandle(value: "abc", kind: .phoneNumber)))
            XCTFail("not a phone number")
        } catch let e as AskError {
            XCTAssertEqual(e, .invalidQuestion)
            guard case .relay(let code, let message)? = child.lastError else { return XCTFail("\(String(describing: child.lastError))") }
            XCTAssertEqual(code, "invalidQuestion")
            XCTAssertTrue(message.contains("\"abc\" is not a valid phoneNumber"), message)
        }
        // A guardian may not ask: notAvailable, as Apple's API says, and the relay's forbidden as the reason.
        let notAChild = AskCenter(configuration: config(relay, "g0", tokens))
        do {
            try await notAChild.ask(contact())
            XCTFail("a guardian asked")
        } catch let e as AskError {
            XCTAssertEqual(e, .notAvailable)
            guard case .relay(let code, _)? = notAChild.lastError else { return XCTFail("\(String(describing: notAChild.lastError))") }
            XCTAssertEqual(code, "forbidden")
        }
        let wrong = AskCenter(configuration: RelayConfiguration(socketPath: relay.socket, member: "c0", token: "nope", session: "x"))
        do {
            try await wrong.ask(contact())
            XCTFail("bad token")
        } catch let e as AskError {
            XCTAssertEqual(e, .systemError(underlyingError: ClientError.unauthorized("")))
        }
    }

    func testAskWithTheRelayDownFailsAfterItsDeadline() async throws {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        relay.crash()
        let child = AskCenter(configuration: config(relay, "c0", tokens, timeout: .milliseconds(600)))
        let failedAfter = await timeToFail(child)
        XCTAssertGreaterThanOrEqual(failedAfter, .milliseconds(500))
        XCTAssertEqual(child.connectionState, .unavailable)
        let why = child.connectionError?.description ?? ""
        XCTAssertTrue(why.contains("cannot connect to \(relay.socket)") && why.contains("is `permission-relay serve` running"), why)

        // A reconnect delay longer than the request's time does not make it fail late.
        var slow = config(relay, "c0", tokens, timeout: .milliseconds(500))
        (slow.reconnectDelay, slow.maxReconnectDelay) = (.seconds(4), .seconds(4))
        let patient = AskCenter(configuration: slow)
        let patientFailedAfter = await timeToFail(patient)
        XCTAssertGreaterThanOrEqual(patientFailedAfter, .milliseconds(500))
        XCTAssertLessThan(patientFailedAfter, .seconds(2), "the request's deadline, not the 3–5 s wait before the next attempt")

        // Once it connects, that reason is no longer the last attempt's.
        var states = child.connectionStates().makeAsyncIterator()
        try relay.start()
        while await states.next() != .ready {}
        XCTAssertNil(child.connectionError)
    }

    func testAHungRelayIsNoticedWithinThreeOfItsHeartbeatsAndAskingGoesOnOnceItWakes() async throws {
        let relay = try RelayProcess(flags: ["--ask-rate-limit", "0", "--heartbeat-seconds", "1"])
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let child = AskCenter(configuration: config(relay, "c0", tokens, timeout: .seconds(30)))
        var states = child.connectionStates().makeAsyncIterator()
        while await states.next() != .ready {}

        kill(relay.pid, SIGSTOP)  // the socket stays open; only silence tells
        let stopped = ContinuousClock.now
        while await states.next() == .ready {}
        let noticed = ContinuousClock.now - stopped
        XCTAssertLessThan(noticed, .seconds(8), "the welcome's heartbeatSeconds (1) sets the client's interval, not its own 15")
        XCTAssertGreaterThanOrEqual(
            noticed, .seconds(1), "a relay is given three silent intervals (the last one heard may have been up to one before)")

        // A new connection to the hung relay is accepted (by the kernel) but never welcomed.
        let other = AskCenter(configuration: config(relay, "c0", tokens, session: "other", timeout: .seconds(1)))
        let otherFailedAfter = await timeToFail(other)
        XCTAssertLessThan(otherFailedAfter, .seconds(4), "the request's deadline, not the 10 s wait for a welcome")

        let question = contact()
        async let resent: Void = child.ask(question)
        kill(relay.pid, SIGCONT)
        try await resent
        let all = try await child.questions()
        XCTAssertEqual(all.map(\.id), [question.id])
    }

    func testTwoClientsOfOneSessionTakeItFromEachOtherEverMoreRarelyAndLoseNothing() async throws {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let first = GuardianCenter(configuration: config(relay, "g0", tokens, session: "shared"))
        let incoming = first.questions()
        var firstStates = first.connectionStates().makeAsyncIterator()
        while await firstStates.next() != .ready {}
        let second = GuardianCenter(configuration: config(relay, "g0", tokens, session: "shared"))
        while await firstStates.next() != .replaced {}
        XCTAssertTrue(
            first.connectionError?.description.contains("another client holds this session (g0, shared)") == true,
            "what a request failing now would say: \(String(describing: first.connectionError))")

        // Each taking the session back at once, the two made thousands of hellos a second.
        let admin = try relay.admin()
        let framesIn = { try admin.request(["type": "status"])["framesIn"]?.int ?? -1 }
        let before = try framesIn()
        try await Task.sleep(for: .seconds(3))  // a window to count in: what is measured is what did not happen
        let hellos = try framesIn() - before - 1
        XCTAssertLessThan(hellos, 40, "frames the relay read in 3 s while two clients shared a session")

        // A question asked while the first waits to connect again reaches it when it does.
        let child = AskCenter(configuration: config(relay, "c0", tokens))
        while first.connectionState != .replaced { _ = await firstStates.next() }
        await second.close()
        let question = contact()
        try await CommunicationLimits(center: child).ask(question)  // Apple's earlier spelling of child.ask
        let seen = await firstElement(of: incoming, within: .seconds(20))
        XCTAssertEqual(seen?.id, question.id, "the first client has the session again, and what came meanwhile")
    }

    /// Two copies of one app at once, each on its default session (two centers here; two
    /// processes hold their locks alike), each waiting for the response to its own
    /// question and letting others go by: each has a session of its own and gets its
    /// response. Sharing one, they took it from each other, and the relay handed a
    /// response to whichever held it then, which let it go as not its own.
    func testTwoCopiesOfAnAppOnTheDefaultSessionEachGetTheirOwnResponse() async throws {
        let (relay, tokens, _, guardian) = try family()
        let env = [
            "PERMISSION_MEMBER": "c0", "PERMISSION_TOKEN": tokens["c0"]!, "PERMISSION_RELAY_SOCKET": relay.socket,
            "PERMISSION_STATE_DIR": relay.dir.appendingPathComponent("state").path,
        ]
        var copies: [AskCenter] = []
        for _ in 0..<2 {
            var c = try RelayConfiguration.fromEnvironment(env, app: "AskApp")
            c.maxReconnectDelay = .milliseconds(200)
            copies.append(AskCenter(configuration: c))
        }
        let questions = [contact(), contact()]
        let waits = zip(copies, questions).map { center, question in
            let responses = center.responses(for: CommunicationTopic.self)
            let id = question.id
            return Task { await firstElement(of: responses, where: { $0.question.id == id }, within: .seconds(15)) != nil }
        }
        for (center, question) in zip(copies, questions) { try await center.ask(question) }
        // Both hold a session at once (sharing one, the second's hello closed the first's).
        let open = try relay.admin().request(["type": "status"])["sessions"]?.int
        XCTAssertEqual(open, 3, "sessions open: the guardian's and one of each copy")
        for question in questions { try await guardian.answer(question.id, with: "approve") }
        for (n, wait) in waits.enumerated() {
            let got = await wait.value
            XCTAssertTrue(got, "copy \(n + 1) got the response to its question")
        }
        for center in copies { await center.close() }
    }

    func testAnOutcomeReplayedAsTheCenterConnectsReachesOutcomesAskedForAfterwards() async throws {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let guardian = GuardianCenter(configuration: config(relay, "g0", tokens))
        let closures = guardian.closedQuestions()
        var question = contact()
        question.expirationDate = Date(timeIntervalSinceNow: 1)
        let asking = AskCenter(configuration: config(relay, "c0", tokens))
        try await asking.ask(question)
        await asking.close()
        let expired = await firstElement(of: closures, within: .seconds(10))
        XCTAssertEqual(expired?.reason, "expired")

        // The app starts again: its center connects at once and is replayed the closure.
        let app = AskCenter(configuration: config(relay, "c0", tokens))
        _ = try await app.limitsEnabled()  // its reply comes after the replay
        let outcome = await firstElement(of: app.outcomes(), within: .seconds(5))
        XCTAssertEqual(outcome?.questionID, question.id)
        XCTAssertEqual(outcome?.reason, .expired)
    }

    func testARotatedTokenStopsTheCenterAndItsRequestsFailAtOnce() async throws {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let guardian = GuardianCenter(configuration: config(relay, "g0", tokens))
        let states = guardian.connectionStates()
        _ = try await guardian.pending()
        _ = try relay.admin().request(["type": "rotateToken", "member": "g0"])
        let refused = await firstElement(of: states, where: { $0 == .refused }, within: .seconds(10))
        XCTAssertEqual(refused, .refused, "the relay closes the connection and refuses the old token")
        let asked = ContinuousClock.now
        do {
            _ = try await guardian.pending()
            XCTFail("the token was rotated")
        } catch AskError.systemError(let e as ClientError) {
            guard case .unauthorized(let why) = e else { return XCTFail("\(e)") }
            XCTAssertTrue(why.hasSuffix("(the member's token was rotated: use the new one)"), why)
        }
        XCTAssertLessThan(ContinuousClock.now - asked, .seconds(1), "refused at once, not after the request's 10 s")
        for await _ in guardian.questions() {}  // ends: nothing more can come
        for await _ in guardian.closedQuestions() {}
    }

    func testARefusalAfterFailedAttemptsIsPublishedAtOnce() async throws {
        let relay = try RelayProcess()
        try relay.start()
        _ = try relay.provision(families: 1)
        relay.crash()
        var slow = config(relay, "g0", ["g0": "not-the-token"], timeout: .seconds(20))
        (slow.reconnectDelay, slow.maxReconnectDelay) = (.seconds(5), .seconds(5))
        let guardian = GuardianCenter(configuration: slow)
        let states = guardian.connectionStates()
        let down = await firstElement(of: states, where: { $0 == .unavailable }, within: .seconds(5))
        XCTAssertEqual(down, .unavailable, "the first attempt finds no relay")
        try relay.start()
        do {
            _ = try await guardian.pending()  // wakes the client: its attempt is refused, and so is the request
            XCTFail("the token is wrong")
        } catch AskError.systemError(let e as ClientError) {
            guard case .unauthorized = e else { return XCTFail("\(e)") }
        }
        let requestRefused = ContinuousClock.now
        let refused = await firstElement(of: states, where: { $0 == .refused }, within: .seconds(15))
        XCTAssertEqual(refused, .refused)
        XCTAssertLessThan(
            ContinuousClock.now - requestRefused, .seconds(2), "at the refusal, not a reconnect delay (3.75 s or more) after it")
    }

    func testRelayKilledMidAskAndMidAnswerLosesAndRepeatsNothing() async throws {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let child = AskCenter(configuration: config(relay, "c0", tokens, timeout: .seconds(20)))
        let guardian = GuardianCenter(configuration: config(relay, "g0", tokens, timeout: .seconds(20)))
        var responses = child.responses(for: CommunicationTopic.self).makeAsyncIterator()
        var states = child.connectionStates().makeAsyncIterator()
        while await states.next() != .ready {}

        relay.crash()
        let question = contact()
        async let asked: Void = child.ask(question)  // waits for the relay to come back
        while await states.next() != .unavailable {}
        try relay.start()
        try await asked
        var incoming = guardian.questions().makeAsyncIterator()
        let q = try await next(&incoming)
        XCTAssertEqual(q.id, question.id)
        try await guardian.answer(q, with: .approve)
        relay.crash()
        try relay.start()
        let response = try await next(&responses)
        XCTAssertEqual(response.question.id, question.id)
        let pending = try await guardian.pending()
        XCTAssertTrue(pending.isEmpty)
        let all = try await child.questions()
        XCTAssertEqual(all.count, 1, "the resent ask made no duplicate")
    }

    func testAResponseCountsAsProcessedOnlyOnceTheAppsLoopComesBackForTheNext() async throws {
        let (relay, tokens, state, guardian) = try family()
        let first = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        var seen = first.responses(for: CommunicationTopic.self).makeAsyncIterator()
        let handled = contact(), handling = contact()
        for q in [handled, handling] {
            try await first.ask(q)
            try await guardian.answer(q.id, with: "approve")
        }
        let firstShown = try await next(&seen)
        XCTAssertEqual(firstShown.question.id, handled.id)
        // Coming back for the next response is what settles the one before it.
        let secondShown = try await next(&seen)
        XCTAssertEqual(secondShown.question.id, handling.id)
        // The app is killed while it handles the second: `first` is never closed, its loop
        // never comes back. Started again, the app gets the second again, not the first.
        let second = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        do {
            var again = second.responses(for: CommunicationTopic.self).makeAsyncIterator()
            let shownAgain = try await next(&again)
            XCTAssertEqual(shownAgain.question.id, handling.id, "a response being handled is never lost")
            // That loop comes back (settling it), takes a marker and ends (settling that):
            // the third run starts after all three.
            let marker = contact()
            try await second.ask(marker)
            try await guardian.answer(marker.id, with: "approve")
            let afterIt = try await next(&again)
            XCTAssertEqual(afterIt.question.id, marker.id, "the first response does not come again")
        }
        await second.close()
        let third = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        try await expectOnlyANewResponse(third, guardian: guardian, "what the app's loop came back from does not come again")
        await third.close()
        withExtendedLifetime(seen) {}
        await first.close()
    }

    func testALoopLeftWithBreakSettlesWhatItWasHanded() async throws {
        let (relay, tokens, state, guardian) = try family()
        let first = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let question = contact()
        try await first.ask(question)
        try await guardian.answer(question.id, with: "approve")
        for await r in first.responses(for: CommunicationTopic.self) where r.question.id == question.id { break }
        // Started again at once, as after a crash: `first` is never closed.
        let second = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        try await expectOnlyANewResponse(second, guardian: guardian, "the response the loop was left with does not come again")
        await second.close()
        await first.close()
    }

    /// A loop left with `break` in top-level code keeps its iterator until the program ends
    /// (kept here by hand): the center closed by that task settles what the loop took. What
    /// a loop of another task is still handling is handed again at the next start, also
    /// when that loop is done with it after the close.
    func testClosingTheCenterSettlesWhatTheClosingTasksLoopsTook() async throws {
        let (relay, tokens, state, guardian) = try family()
        let first = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let mine = contact(), theirs = contact()
        var kept = first.responses(for: CommunicationTopic.self).makeAsyncIterator()
        try await first.ask(mine)
        try await guardian.answer(mine.id, with: "approve")
        let took = try await next(&kept)
        XCTAssertEqual(took.question.id, mine.id)
        // Another task's loop takes the next response and is still handling it at the close.
        let (gate, release) = AsyncStream<Void>.makeStream()
        let (taken, tookIt) = AsyncStream<UUID>.makeStream()
        let others = first.responses(for: CommunicationTopic.self)
        let handling = Task {
            for await r in others where r.question.id == theirs.id {
                tookIt.yield(r.question.id)
                for await _ in gate {}  // handling it, until the test is over
            }
        }
        try await first.ask(theirs)
        try await guardian.answer(theirs.id, with: "approve")
        var takenIDs = taken.makeAsyncIterator()
        let otherTook = try await next(&takenIDs)
        XCTAssertEqual(otherTook, theirs.id)
        await first.close()
        release.finish()  // done with it, but after the close: not recorded
        await handling.value
        let second = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let shownAgain = await firstElement(of: second.responses(for: CommunicationTopic.self), within: .seconds(10))
        XCTAssertEqual(shownAgain?.question.id, theirs.id, "the response the closing task's loop took does not come again")
        await second.close()
        withExtendedLifetime(kept) {}
    }

    /// Two loops over the same responses: one coming back for its next does not count the
    /// response as processed while the other still handles it.
    func testAResponseIsProcessedOnlyOnceEveryLoopThatTookItIsDone() async throws {
        let (relay, tokens, state, guardian) = try family()
        let first = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        var a = first.responses(for: CommunicationTopic.self).makeAsyncIterator()
        var b = first.responses(for: CommunicationTopic.self).makeAsyncIterator()
        let q1 = contact(), q2 = contact()
        try await first.ask(q1)
        try await guardian.answer(q1.id, with: "approve")
        let tookA = try await next(&a), tookB = try await next(&b)
        XCTAssertEqual([tookA.question.id, tookB.question.id], [q1.id, q1.id])
        try await first.ask(q2)
        try await guardian.answer(q2.id, with: "approve")
        let nextA = try await next(&a)  // a is done with q1's response; b still handles it
        XCTAssertEqual(nextA.question.id, q2.id)
        // Killed now: started again, the app is handed q1's response first.
        let second = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        var again = second.responses(for: CommunicationTopic.self).makeAsyncIterator()
        let r = try await next(&again)
        XCTAssertEqual(r.question.id, q1.id, "loop b never finished with q1's response")
        await second.close()
        withExtendedLifetime((a, b)) {}
        await first.close()
    }

    /// A loop opened again in the same process (a view that appears again, say) is not
    /// handed what an earlier loop is done with: shown twice only to an app killed while
    /// it handled it.
    func testALoopOpenedAgainIsNotHandedWhatAnEarlierLoopIsDoneWith() async throws {
        let (relay, tokens, state, guardian) = try family()
        let center = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let handled = contact()
        try await center.ask(handled)
        try await guardian.answer(handled.id, with: "approve")
        for await r in center.responses(for: CommunicationTopic.self) where r.question.id == handled.id { break }
        try await expectOnlyANewResponse(center, guardian: guardian, "the response the first loop handled came again")
        await center.close()
    }

    /// A loop left with `return` in a function (waiting for one question's response) lets
    /// its stream go: a response that comes later is not held back by it, so one another
    /// loop handled is not handed again at the next start.
    func testALoopThatEndedHoldsNothingBack() async throws {
        let (relay, tokens, state, guardian) = try family()
        let first = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        func waitFor(_ id: UUID) async {
            for await r in first.responses(for: CommunicationTopic.self) where r.question.id == id { return }
        }
        let mine = contact(), later = contact()
        try await first.ask(mine)
        try await guardian.answer(mine.id, with: "approve")
        await waitFor(mine.id)
        try await first.ask(later)
        try await guardian.answer(later.id, with: "approve")
        await waitFor(later.id)
        // Killed now (`first` is never closed): started again, nothing handled comes again.
        let second = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        try await expectOnlyANewResponse(second, guardian: guardian, "a response handled came again")
        await second.close()
        await first.close()
    }

    /// A sequence made and never iterated (`CommunicationLimits.updates` read, say) takes no
    /// response: what the app's loop handled does not come again at the next start.
    func testASequenceNeverIteratedHoldsNothingBack() async throws {
        let (relay, tokens, state, guardian) = try family()
        let first = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let unused = CommunicationLimits(center: first).updates
        var loop = first.responses(for: CommunicationTopic.self).makeAsyncIterator()
        let question = contact()
        try await first.ask(question)
        try await guardian.answer(question.id, with: "approve")
        let shown = try await next(&loop)
        XCTAssertEqual(shown.question.id, question.id)
        await first.close()  // by the task whose loop took it: done with it
        let second = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        try await expectOnlyANewResponse(second, guardian: guardian, "the unused sequence held the response back")
        await second.close()
        withExtendedLifetime((loop, unused)) {}
    }

    /// The center replays what closed while the app was away as soon as it is made; an app
    /// that asks for outcomes a moment later, and is killed while handling one, gets it again.
    func testAnOutcomeReplayedBeforeTheAppAskedForOutcomesWaitsForIt() async throws {
        let (relay, tokens, state, guardian) = try family()
        let question = contact()
        let asking = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        try await asking.ask(question)
        await asking.close()
        let closures = guardian.closedQuestions()
        let child = AskCenter(configuration: config(relay, "c0", tokens, session: "other"))
        try await child.cancel(questionID: question.id)
        await child.close()
        _ = await firstElement(of: closures, within: .seconds(10))
        let app = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        _ = try await app.limitsEnabled()  // connected, and replayed the closure meanwhile
        var it = app.outcomes().makeAsyncIterator()
        let o = try await it.next()
        XCTAssertEqual(o?.questionID, question.id)
        // Killed while handling it: started again, the app gets it again.
        let again = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let replayed = await firstElement(of: again.outcomes(), within: .seconds(5))
        XCTAssertEqual(replayed?.questionID, question.id, "the outcome the app was handling is not lost")
        await again.close()
        withExtendedLifetime(it) {}
        await app.close()
    }

    /// Asks a new question on `center` and has `guardian` approve it: the next response
    /// `center` shows must be that one.
    private func expectOnlyANewResponse(_ center: AskCenter, guardian: GuardianCenter, _ message: String, line: UInt = #line)
        async throws
    {
        var responses = center.responses(for: CommunicationTopic.self).makeAsyncIterator()
        let question = contact()
        try await center.ask(question)
        try await guardian.answer(question.id, with: "approve")
        let response = try await next(&responses)
        XCTAssertEqual(response.question.id, question.id, message, line: line)
    }

    /// c0's app, keeping its place in `state`, asks `question` and stops.
    private func askAndStop(
        _ question: PermissionQuestion<CommunicationTopic>, _ relay: RelayProcess, _ tokens: [String: String], state: String
    ) async throws {
        let app = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        _ = app.responses(for: CommunicationTopic.self)
        try await app.ask(question)
        await app.close()
    }

    func testAppRestartedBeforeDeliveryGetsTheResponseExactlyOnce() async throws {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let state = relay.dir.appendingPathComponent("child.state").path
        let question = contact()
        try await askAndStop(question, relay, tokens, state: state)  // before the answer comes
        let guardian = GuardianCenter(configuration: config(relay, "g0", tokens))
        try await guardian.answer(question.id, with: "decline")

        let second = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        do {
            var responses = second.responses(for: CommunicationTopic.self).makeAsyncIterator()
            let r = try await next(&responses)
            XCTAssertEqual(r.question.id, question.id)
            XCTAssertEqual(r.choice, .decline)
            // A marker question after it: the third run must see only the marker's response.
            let marker = contact()
            try await second.ask(marker)
            try await guardian.answer(marker.id, with: "approve")
            let m = try await next(&responses)
            XCTAssertEqual(m.question.id, marker.id)
        }  // the app's loop ends: what it was handed is processed
        await second.close()

        let third = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        try await expectOnlyANewResponse(third, guardian: guardian, "nothing already processed comes again")
    }

    /// What the relay dropped while the app was away (here, past a retention of a second)
    /// leaves a gap in its stream: the app still gets the response to one question and the
    /// closing of another it asked, from the relay's record of them, and once only.
    func testAResponseDroppedWhileTheAppWasAwayStillReachesItOnce() async throws {
        let (relay, tokens, state) = try relayKeepingEventsASecond()
        let (answered, cancelled) = (contact(), contact())
        try await askAndStop(answered, relay, tokens, state: state)
        try await askAndStop(cancelled, relay, tokens, state: state)
        let guardian = GuardianCenter(configuration: config(relay, "g0", tokens))
        try await guardian.answer(answered.id, with: "decline")
        let other = AskCenter(configuration: config(relay, "c0", tokens, session: "other"))  // another app of the child
        try await other.cancel(questionID: cancelled.id)
        await other.close()
        try awaitEverythingDropped(relay, tokens)

        let again = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        // Each loop ends with what it was handed: that is processed.
        let r = await firstElement(of: again.responses(for: CommunicationTopic.self), within: .seconds(10))
        XCTAssertEqual(r?.question.id, answered.id)
        XCTAssertEqual(r?.choice, .decline)
        XCTAssertEqual(r?.guardian, "g0")
        let o = await firstElement(of: again.outcomes(), within: .seconds(10))
        XCTAssertEqual(o?.questionID, cancelled.id)
        XCTAssertEqual(o?.reason, .cancelled)
        await again.close()
        let third = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        try await expectOnlyANewResponse(third, guardian: guardian, "no recovered response comes again")
        var outcomes = third.outcomes().makeAsyncIterator()
        let marker = contact()
        try await third.ask(marker)
        try await third.cancel(marker)
        let next = try await next(&outcomes)
        XCTAssertEqual(next.questionID, marker.id, "no recovered outcome comes again")
        await third.close()
    }

    /// Within one run: a response dropped while the app's relay was away (the relay stopped,
    /// another on its store answering and dropping everything past a retention of a second)
    /// reaches the app once the relay is back, also for a question cancelled and asked again.
    func testAResponseDroppedDuringARunReachesTheAppInThatRun() async throws {
        let (relay, tokens, state) = try relayKeepingEventsASecond()
        let app = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let again = contact()
        try await app.ask(again)
        try await app.cancel(again)
        let closed = await firstElement(of: app.outcomes(), within: .seconds(10))
        XCTAssertEqual(closed?.questionID, again.id)
        try await app.ask(again)  // cancelled: asked anew
        try await whileAway(relay, tokens) { other in
            let guardian = GuardianCenter(configuration: self.config(other, "g0", tokens))
            try await guardian.answer(again.id, with: "approve")
            await guardian.close()
        }
        let r = await firstElement(of: app.responses(for: CommunicationTopic.self), within: .seconds(10))
        XCTAssertEqual(r?.question.id, again.id)
        XCTAssertEqual(r?.choice, .approve, "the response to the question asked anew, recovered in the run")
        await app.close()
    }

    /// A response the stream brought that the app had not taken yet, dropped during the run,
    /// reaches it at its next start.
    func testAResponseHeldAndDroppedDuringARunReachesTheAppAtItsNextStart() async throws {
        let (relay, tokens, state) = try relayKeepingEventsASecond()
        let app = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let guardian = GuardianCenter(configuration: config(relay, "g0", tokens))
        let held = contact()
        try await app.ask(held)
        try await guardian.answer(held.id, with: "decline")
        try await awaitInHand(app, guardian)
        try await gapWhileRunning(app, relay, tokens)
        _ = try await app.questions()  // and is in hand by this one's reply
        await app.close()  // the held response was never taken (as if the app was killed)
        await guardian.close()

        let next = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let h = await firstElement(of: next.responses(for: CommunicationTopic.self), within: .seconds(10))
        XCTAssertEqual(h?.question.id, held.id, "the response held and dropped, at the next start")
        await next.close()
    }

    /// An app that never asks for outcomes holds them until it closes: one asks a cancelled
    /// question again, and the cancellation it still holds, processed as it closes, leaves
    /// the new asking awaited: its response, dropped while the app was away, still reaches it.
    func testAQuestionAskedAgainWhileItsLastOutcomeIsHeldStaysAwaited() async throws {
        let (relay, tokens, state) = try relayKeepingEventsASecond()
        let app = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let guardian = GuardianCenter(configuration: config(relay, "g0", tokens))
        let question = contact()
        try await app.ask(question)
        try await app.cancel(question)
        try await awaitInHand(app, guardian)  // the cancellation too
        try await app.ask(question)  // cancelled: asked anew
        await app.close()  // the cancellation is processed now
        try await whileAway(relay, tokens) { other in
            let guardian = GuardianCenter(configuration: self.config(other, "g0", tokens))
            try await guardian.answer(question.id, with: "decline")
            await guardian.close()
        }
        await guardian.close()
        let next = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let r = await firstElement(of: next.responses(for: CommunicationTopic.self), within: .seconds(10))
        XCTAssertEqual(r?.question.id, question.id)
        XCTAssertEqual(r?.choice, .decline)
        await next.close()
    }

    /// A resend of a question answered while the app holds its response (the relay says
    /// `answered`) leaves it awaited: dropped later, the response still reaches the app.
    func testAResendOfAnAnsweredQuestionLeavesItAwaited() async throws {
        let (relay, tokens, state) = try relayKeepingEventsASecond()
        let app = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let guardian = GuardianCenter(configuration: config(relay, "g0", tokens))
        let question = contact()
        try await app.ask(question)
        try await guardian.answer(question.id, with: "approve")
        try await awaitInHand(app, guardian)
        let resent = try await app.submit(question)
        XCTAssertEqual(resent.status, "answered")
        await app.close()  // the response never taken (as if the app was killed)
        try awaitEverythingDropped(relay, tokens)
        let next = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let r = await firstElement(of: next.responses(for: CommunicationTopic.self), within: .seconds(10))
        XCTAssertEqual(r?.question.id, question.id)
        await next.close()
        await guardian.close()
    }

    /// A question asked again while the app holds the closing of its last asking (its
    /// outcomes stream not done with it as it stops): that closing, processed at the next
    /// start, leaves the new asking awaited, and its response, dropped, reaches the app.
    func testAQuestionAskedAgainStaysAwaitedAcrossARestart() async throws {
        let (relay, tokens, state) = try relayKeepingEventsASecond()
        let guardian = GuardianCenter(configuration: config(relay, "g0", tokens))
        let question = contact()
        do {
            let app = AskCenter(configuration: config(relay, "c0", tokens, state: state))
            _ = app.outcomes()  // an app that takes outcomes: they wait for it
            try await app.ask(question)
            try await app.cancel(question)
            try await awaitInHand(app, guardian)
            try await app.ask(question)  // cancelled: asked anew
            await app.close()
        }
        do {
            let app = AskCenter(configuration: config(relay, "c0", tokens, state: state))
            let o = await firstElement(of: app.outcomes(), within: .seconds(10))
            XCTAssertEqual(o?.questionID, question.id)
            XCTAssertEqual(o?.reason, .cancelled)
            await app.close()
        }
        try await guardian.answer(question.id, with: "decline")
        try awaitEverythingDropped(relay, tokens)
        let app = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let r = await firstElement(of: app.responses(for: CommunicationTopic.self), within: .seconds(10))
        XCTAssertEqual(r?.question.id, question.id)
        XCTAssertEqual(r?.choice, .decline)
        await app.close()
        await guardian.close()
    }

    /// The app, handed a cancellation replayed after a gap, asks the question again while
    /// the relay is asked how its questions stand: the listing, older than the new asking,
    /// hands nothing again, and the new asking's response comes.
    func testAQuestionAskedAgainDuringTheCheckIsNotHandedItsLastClosingAgain() async throws {
        let relay = try RelayProcess(flags: ["--retention-seconds", "3", "--ask-rate-limit", "0"])
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let state = relay.dir.appendingPathComponent("child.state").path
        let question = contact()
        try await askAndStop(question, relay, tokens, state: state)
        let other = AskCenter(configuration: config(relay, "c0", tokens, session: "other"))  // another app of the child
        let dropped = contact()
        try await other.ask(dropped)
        try await other.cancel(dropped)
        try awaitEverythingDropped(relay, tokens)  // a gap before the cancellation that follows
        try await other.cancel(questionID: question.id)
        await other.close()

        let app = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let guardian = GuardianCenter(configuration: config(relay, "g0", tokens))
        let closings = Mutex<[UUID]>([])
        let marker = contact()
        let (askedAnew, asking) = AsyncStream<Bool>.makeStream()
        let loop = Task {
            for await o in app.outcomes() {
                closings.withLock { $0.append(o.questionID) }
                if o.questionID == question.id { asking.yield((try? await app.submit(question)) != nil) }  // asked anew at once
                if o.questionID == marker.id { return }
            }
        }
        let anew = await firstElement(of: askedAnew, within: .seconds(10))
        XCTAssertEqual(anew, true, "the replayed cancellation, then the question asked anew")
        try await guardian.answer(question.id, with: "approve")
        let answered = await firstElement(
            of: app.responses(for: CommunicationTopic.self), where: { $0.question.id == question.id }, within: .seconds(10))
        XCTAssertEqual(answered?.choice, .approve, "the new asking's response")
        try await app.ask(marker)
        try await app.cancel(marker)
        await loop.value  // every closing before the marker's is taken
        XCTAssertEqual(closings.withLock { $0 }, [question.id, marker.id], "the cancellation once")
        await app.close()
        await guardian.close()
    }

    /// An ask again that fails (here, from a task cancelled before it is sent) leaves the
    /// question as it was: the closing of its last asking, processed, is not recovered after a gap.
    func testAnAskAgainThatFailsChangesNothing() async throws {
        let (relay, tokens, state) = try relayKeepingEventsASecond()
        let app = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let (question, marker) = (contact(), contact())
        let closings = Mutex<[UUID]>([])
        let (handled, handling) = AsyncStream<Void>.makeStream()
        let loop = Task {
            for await o in app.outcomes() {
                closings.withLock { $0.append(o.questionID) }
                if o.questionID == question.id {
                    let again = Task { try await app.submit(question) }
                    again.cancel()
                    let sent = try? await again.value
                    XCTAssertNil(sent, "cancelled before it was sent")
                    handling.yield()
                }
                if o.questionID == marker.id { return }
            }
        }
        try await app.ask(question)
        try await app.cancel(question)
        let tookIt: Void? = await firstElement(of: handled, within: .seconds(10))
        XCTAssertNotNil(tookIt)
        try await gapWhileRunning(app, relay, tokens)
        try await app.ask(marker)
        try await app.cancel(marker)
        await loop.value
        XCTAssertEqual(closings.withLock { $0 }, [question.id, marker.id], "the cancellation once")
        await app.close()
    }

    /// A question cancelled, asked again and cancelled again while the app's loop handles the
    /// first cancellation: with the second in the loop's hands as a gap passes, each is
    /// handed once.
    func testTwoClosingsOfOneQuestionInHandAcrossAGapAreHandedOnceEach() async throws {
        let (relay, tokens, state) = try relayKeepingEventsASecond()
        let app = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let guardian = GuardianCenter(configuration: config(relay, "g0", tokens))
        let (question, marker) = (contact(), contact())
        let closings = Mutex<[UUID]>([])
        let (second, holding) = AsyncStream<Void>.makeStream()
        let (checked, gapPassed) = AsyncStream<Void>.makeStream()
        let loop = Task {
            var passed = checked.makeAsyncIterator()
            for await o in app.outcomes() {
                let n = closings.withLock {
                    $0.append(o.questionID); return $0.count
                }
                if n == 1 {
                    try await app.ask(question)
                    try await app.cancel(question)
                    try await awaitInHand(app, guardian)  // the second cancellation too
                } else if n == 2 {
                    holding.yield()
                    _ = await passed.next()  // held while a gap passes
                }
                if o.questionID == marker.id { return }
            }
        }
        try await app.ask(question)
        try await app.cancel(question)
        let inHand: Void? = await firstElement(of: second, within: .seconds(10))
        XCTAssertNotNil(inHand)
        try await gapWhileRunning(app, relay, tokens)
        _ = try await app.questions()
        gapPassed.yield()
        try await app.ask(marker)
        try await app.cancel(marker)
        try await loop.value
        XCTAssertEqual(closings.withLock { $0 }, [question.id, question.id, marker.id], "each cancellation once")
        await app.close()
        await guardian.close()
    }

    /// A relay that keeps events a second, provisioned with one family, and a state file for the child's app.
    private func relayKeepingEventsASecond() throws -> (RelayProcess, [String: String], state: String) {
        let relay = try RelayProcess(flags: ["--retention-seconds", "1", "--ask-rate-limit", "0"])
        try relay.start()
        return (relay, try relay.provision(families: 1), relay.dir.appendingPathComponent("child.state").path)
    }

    /// A gap in the stream of `app`, running: its relay goes away while everything is
    /// dropped, and returns when `app` is welcomed again (the relay is then asked how its
    /// questions stand).
    private func gapWhileRunning(_ app: AskCenter, _ relay: RelayProcess, _ tokens: [String: String]) async throws {
        var states = app.connectionStates().makeAsyncIterator()
        try await whileAway(relay, tokens) { _ in }
        while await states.next() == .ready {}
        while await states.next() != .ready {}
    }

    /// Until the child's stream has dropped everything: a session that resumes from its
    /// start is told of a gap and starts at the head.
    private func awaitEverythingDropped(_ relay: RelayProcess, _ tokens: [String: String]) throws {
        let deadline = Date().addingTimeInterval(30)
        while true {
            let w = try relay.connect().hello("c0", tokens["c0"]!, session: "probe", resume: 0)
            if w["gap"]?.bool == true && w["cursor"] == w["head"] { return }
            guard Date() < deadline else { return XCTFail("the relay kept the events past their retention") }
            usleep(100_000)
        }
    }

    /// Stops `relay`, runs `meanwhile` against another relay on its store until the child's
    /// stream has dropped everything, then starts `relay` again.
    private func whileAway(
        _ relay: RelayProcess, _ tokens: [String: String], meanwhile: (RelayProcess) async throws -> Void
    ) async throws {
        XCTAssertEqual(relay.terminate(), 0)
        let other = try RelayProcess(flags: relay.flags, socket: relay.dir.appendingPathComponent("other.sock").path, data: relay.data)
        try other.start()
        try await meanwhile(other)
        try awaitEverythingDropped(other, tokens)
        XCTAssertEqual(other.terminate(), 0)
        try relay.start()
    }

    /// An app whose session the relay forgot (here, past `--max-sessions-per-member`) is a new
    /// session when it comes back; its hello names its topics, so its replay still has its responses.
    func testAnAppWhoseSessionTheRelayForgotStillGetsItsResponse() async throws {
        let relay = try RelayProcess(flags: ["--max-sessions-per-member", "1"])
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let state = relay.dir.appendingPathComponent("child.state").path
        let question = contact()
        try await askAndStop(question, relay, tokens, state: state)
        let guardian = GuardianCenter(configuration: config(relay, "g0", tokens))
        try await guardian.answer(question.id, with: "approve")
        do {  // another app of the child takes the one place
            let other = AskCenter(configuration: config(relay, "c0", tokens, session: "other"))
            var states = other.connectionStates().makeAsyncIterator()
            while await states.next() != .ready {}
            await other.close()
        }

        let again = AskCenter(configuration: config(relay, "c0", tokens, state: state))
        let r = await firstElement(of: again.responses(for: CommunicationTopic.self), within: .seconds(10))
        XCTAssertEqual(r?.question.id, question.id)
        XCTAssertEqual(r?.choice, .approve)
        await again.close()
    }
}

/// Until everything the relay sent `app` before this call is in its hands: the response
/// to a question of the other topic asked now comes after it.
private func awaitInHand(_ app: AskCenter, _ guardian: GuardianCenter) async throws {
    let marker = PermissionQuestion(significantAppUpdateTopic: SignificantAppUpdateTopic(description: "v\(Int.random(in: 1...999))"))
    try await app.ask(marker)
    try await guardian.answer(marker.id, with: "approve")
    let r = await firstElement(of: app.responses(for: SignificantAppUpdateTopic.self), within: .seconds(10))
    XCTAssertEqual(r?.question.id, marker.id)
}

/// The first element of `stream` that `matches`, or nil when none comes within `limit`.
func firstElement<S: AsyncSequence & Sendable>(
    of stream: S, where matches: @escaping @Sendable (S.Element) -> Bool = { _ in true }, within limit: Duration
) async -> S.Element? where S.Element: Sendable, S.Failure == Never {
    await withTaskGroup(of: S.Element?.self) { group in
        group.addTask {
            for await element in stream where matches(element) { return element }
            return nil
        }
        group.addTask {
            try? await Task.sleep(for: limit)
            return nil
        }
        let first = await group.next() ?? nil
        group.cancelAll()
        return first
    }
}

/// The next element of an async sequence that must not end.
func next<I: AsyncIteratorProtocol>(_ it: inout I, file: StaticString = #filePath, line: UInt = #line) async throws -> I.Element
where I.Failure == Never {
    guard let v = try await it.next() else {
        XCTFail("the sequence ended", file: file, line: line)
        throw CancellationError()
    }
    return v
}
