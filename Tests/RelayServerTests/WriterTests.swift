// The server and the store's writer, through bursts of asks too large for the loop to
// commit itself: a turn that changes nothing sends behind the turns waiting for the
// writer; a commit that fails there acknowledges nothing of it, the writer commits again
// once the loop has rebuilt its core, and should the store not be readable then, the
// relay stops.

import Foundation
import RelayModel
import RelayProtocol
import RelayServer
import RelayStore
import Synchronization
import XCTest

final class WriterTests: XCTestCase {
    func testAReplyThatChangesNothingWaitsBehindTheTurnsWithTheWriter() throws {
        let store = WriterStore(loadsFailAfterAFailure: false)
        store.holdsLargeCommits.withLock { $0 = true }
        let relay = try InProcessRelay(store: store)
        defer { relay.stop() }
        defer { store.largeCommit.mayEnd.signal() }
        let tokens = try relay.provision()
        let c = try relay.connect()
        try c.hello("c1", tokens["c1"]!)
        try c.sendRaw(burst(of: 200, prefix: "b"))
        XCTAssertEqual(store.largeCommit.started.wait(timeout: .now() + 10), .success, "the writer commits the burst")
        try c.send(["type": "ping"])  // its pong changes nothing
        store.largeCommit.mayEnd.signal()
        var before: [String] = []
        while true {
            let f = try c.next()
            if f["type"]?.string == "pong" { break }
            before.append(f["re"]?.string ?? "\(f)")
        }
        XCTAssertEqual(before, (0..<200).map { "b\($0)" }, "every ask's reply before the pong")
    }

    /// Connections of one member that send requests and never read, while their replies
    /// wait for a commit, are held together about the member's limit of replies, not each
    /// as much as one connection may be owed: past it, their requests wait for the commit,
    /// and those that do not read are dropped.
    func testAMembersConnectionsThatPipelineAndNeverReadAreOwedBoundedTogether() throws {
        let held = try firstDroppedHolds { $0.maxMemberOutputBytes = 1 << 20 }
        XCTAssertLessThan(held, 2 << 20, "a connection took more requests than its member's limit lets")
    }

    /// The same bound for all connections together.
    func testConnectionsThatPipelineAndNeverReadAreOwedBoundedInAll() throws {
        let held = try firstDroppedHolds { $0.maxTotalOutputBytes = 1 << 20 }
        XCTAssertLessThan(held, 2 << 20, "a connection took more requests than the relay's limit lets")
    }

    /// Six connections of one guardian pipeline requests with replies of about 1.1 MB each
    /// while a commit is held, and never read: the unsent bytes of the first the relay drops
    /// (0 if none).
    private func firstDroppedHolds(_ limit: (inout ServerConfig) -> Void) throws -> Int {
        let store = WriterStore(loadsFailAfterAFailure: false)
        let lines = LoggedLines()
        let relay = try InProcessRelay(store: store, log: lines.log) { server, _ in
            server.maxOutputBytes = 32 << 20  // a connection is owed up to 19 MiB before its requests wait
            limit(&server)
        }
        defer { relay.stop() }
        defer { store.largeCommit.mayEnd.signal() }
        let tokens = try relay.provision()
        let c = try relay.connect()
        try c.hello("c1", tokens["c1"]!)
        for i in 0..<8 {
            try c.send(["type": "ask", "id": .string("a\(i)"), "question": .object(sampleQuestion(avatarBytes: 100_000))])
            try c.expect(type: "ok")
        }
        var idle: [Wire] = []
        for _ in 0..<6 {
            let g = try relay.connect()
            try g.hello("g1", tokens["g1"]!)
            idle.append(g)
        }
        store.holdsLargeCommits.withLock { $0 = true }
        try c.sendRaw(burst(of: 100, prefix: "b"))
        XCTAssertEqual(store.largeCommit.started.wait(timeout: .now() + 10), .success, "the writer commits the burst")
        for g in idle {  // never read from again
            try g.sendRaw((0..<20).flatMap { i in (["type": "pending", "id": .string("p\(i)")] as JSONObject).frame })
        }
        // Their requests are read (and so taken, as far as they are) while the commit is held.
        let deadline = Date().addingTimeInterval(10)
        while idle.contains(where: { unread(by: $0) > 0 }) && Date() < deadline { usleep(10_000) }
        store.largeCommit.mayEnd.signal()
        // Once the pong comes, the replies held with the burst were sent, or their connections dropped.
        try c.send(["type": "ping"])
        while try c.next()["type"]?.string != "pong" {}
        guard let dropped = lines.first(containing: "as a slow consumer", within: 0) else { return 0 }
        let words = dropped.split(separator: " ")
        return try XCTUnwrap(words.firstIndex(of: "holds").flatMap { Int(words[$0 + 1]) }, dropped)
    }

    /// Bytes written to the connection's socket that the relay has not read yet.
    private func unread(by w: Wire) -> Int32 {
        var queued: Int32 = 0
        _ = ioctl(w.c.fd, UInt(TIOCOUTQ), &queued)
        return queued
    }

    func testAFailedCommitOnTheWriterKeepsWhatWasAcknowledgedAndTheWriterCommitsAgain() throws {
        let store = WriterStore(loadsFailAfterAFailure: false)
        let logged = LoggedLines()
        let relay = try InProcessRelay(store: store, log: logged.log)
        defer { relay.stop() }
        let tokens = try relay.provision()
        let c = try relay.connect()
        try c.hello("c1", tokens["c1"]!)
        store.failsLargeCommits.withLock { $0 = true }
        try c.sendRaw(burst(of: 200, prefix: "b"))
        let acknowledged = Set(try c.untilClosed().compactMap { $0["re"]?.string })
        XCTAssertNotNil(logged.first(containing: "could not commit to the store"))
        store.failsLargeCommits.withLock { $0 = false }

        Thread.sleep(forTimeInterval: 1.2)  // new connections are refused for a second
        let g = try relay.connect()
        try g.hello("g1", tokens["g1"]!)
        try g.send(["type": "pending", "id": "p"])
        let stored = Set(try g.expect(type: "ok")["questions"]!.array!.compactMap { $0["id"]?.string })
        XCTAssertEqual(stored.count, acknowledged.count, "stored: the asks acknowledged (\(acknowledged.sorted()))")
        // The writer takes a burst again: it has resumed.
        let c2 = try relay.connect()
        try c2.hello("c1", tokens["c1"]!)
        try c2.sendRaw(burst(of: 100, prefix: "x"))
        for _ in 0..<100 { try c2.expect(type: "ok") }
    }

    /// The core then holds changes the store never took: its shutdown stores and sends
    /// nothing, and ends (the turns it made went to a writer that drops them).
    func testAFailedCommitThenAStoreThatCannotBeReadStopsTheRelay() throws {
        let store = WriterStore(loadsFailAfterAFailure: true)
        let logged = LoggedLines()
        let relay = try InProcessRelay(store: store, log: logged.log) { server, _ in
            server.cursorFlushSeconds = 3600  // the cursor below is stored at the shutdown
            server.pruneIntervalSeconds = 3600
        }
        let (c, g) = try askAndAcknowledge(on: relay)
        store.failsLargeCommits.withLock { $0 = true }
        try c.sendRaw(burst(of: 200, prefix: "b"))
        XCTAssertNotNil(logged.first(containing: "could not commit to the store"))
        XCTAssertNotNil(logged.first(containing: "could not reload the store"))
        let stopped = DispatchSemaphore(value: 0)
        let failure = Mutex<String?>(nil)
        DispatchQueue.global().async {
            let reported = relay.stopReportingFailure()
            failure.withLock { $0 = reported }
            stopped.signal()
        }
        XCTAssertEqual(stopped.wait(timeout: .now() + 10), .success, "the relay stops")
        withExtendedLifetime(g) {}  // open until the stop
        // A service manager sees a failure, not a clean stop.
        XCTAssertTrue(failure.withLock { $0 }?.contains("could not be read back") == true, "\(failure.withLock { $0 } ?? "no failure")")
    }

    /// The cursor an ack moved is stored at the stop; when that commit fails, `run` says so.
    func testACommitThatFailsAtTheStopIsAFailure() throws {
        let store = WriterStore(loadsFailAfterAFailure: false)
        let relay = try InProcessRelay(store: store) { server, _ in server.cursorFlushSeconds = 3600 }
        let (_, g) = try askAndAcknowledge(on: relay)
        store.failsEveryCommit.withLock { $0 = true }
        let failure = relay.stopReportingFailure()
        withExtendedLifetime(g) {}  // open until the stop
        XCTAssertTrue(failure?.contains("not committed") == true, "\(failure ?? "no failure")")
    }

    /// A replay step reads what it sends: events of a few hundred kilobytes each were read
    /// again at every step, a replay's cost growing with the square of its length.
    func testAReplayOfLargeEventsReadsEachOnce() throws {
        let store = WriterStore(loadsFailAfterAFailure: false)
        let relay = try InProcessRelay(store: store)
        defer { relay.stop() }
        let tokens = try relay.provision()
        do { try relay.connect().hello("g1", tokens["g1"]!, session: "phone") }  // and gone
        let c = try relay.connect()
        try c.hello("c1", tokens["c1"]!)
        for i in 0..<40 {
            try c.send(["type": "ask", "id": .string("a\(i)"), "question": .object(sampleQuestion(avatarBytes: 100_000))])
            try c.expect(type: "ok")
        }
        store.eventBytesRead.withLock { $0 = 0 }
        let g = try relay.connect()
        try g.hello("g1", tokens["g1"]!, session: "phone", resume: 0)
        var replayed = 0
        for _ in 0..<40 { replayed += try g.expect(type: "question").frame.count }
        XCTAssertLessThan(
            store.eventBytesRead.withLock { $0 }, 2 * replayed, "read \(store.eventBytesRead.withLock { $0 }) bytes to send \(replayed)")
    }

    /// c1 asks, and g1's durable session acknowledges the question (a cursor moved, stored
    /// at the next flush); returns both connections.
    private func askAndAcknowledge(on relay: InProcessRelay) throws -> (child: Wire, guardian: Wire) {
        let tokens = try relay.provision()
        let g = try relay.connect()
        try g.hello("g1", tokens["g1"]!, session: "phone")
        let c = try relay.connect()
        try c.hello("c1", tokens["c1"]!)
        try c.send(["type": "ask", "id": "first", "question": .object(sampleQuestion())])
        try c.expect(type: "ok")
        try g.send(["type": "ack", "seq": try g.expect(type: "question")["seq"]!])
        try g.send(["type": "ping"])
        try g.expect(type: "pong")
        return (c, g)
    }

    private func burst(of count: Int, prefix: String) -> [UInt8] {
        (0..<count).flatMap { i in
            (["type": "ask", "id": .string("\(prefix)\(i)"), "question": .object(sampleQuestion())] as JSONObject).frame
        }
    }
}

/// A memory store whose commits (every one, while it `failsEveryCommit`) of more than 64 changes (the writer's, never the loop's)
/// wait to be let end while it `holdsLargeCommits`, and fail while told to; after such a
/// failure its loads fail too if so made, and the writer's next `finishCommits` takes 2 s
/// (so that the loop's next turns reach a writer that is busy).
private final class WriterStore: RelayStore {
    let inner = MemoryStore()
    let holdsLargeCommits = Mutex(false)
    let largeCommit = (started: DispatchSemaphore(value: 0), mayEnd: DispatchSemaphore(value: 0))
    let failsLargeCommits = Mutex(false)
    let failsEveryCommit = Mutex(false)
    /// Bytes of the event frames `events` gave.
    let eventBytesRead = Mutex(0)
    let loadsFail = Mutex(false)
    let slowFinish = Mutex(false)
    let loadsFailAfterAFailure: Bool

    init(loadsFailAfterAFailure: Bool) { self.loadsFailAfterAFailure = loadsFailAfterAFailure }

    func load() throws -> StoreSnapshot {
        if loadsFail.withLock({ $0 }) { throw StoreError("disk I/O error") }
        return try inner.load()
    }
    func commit(_ changes: [Change]) throws {
        if failsEveryCommit.withLock({ $0 }) { throw StoreError("disk I/O error") }
        if changes.count > 64, holdsLargeCommits.withLock({ $0 }) {
            largeCommit.started.signal()
            largeCommit.mayEnd.wait()
        }
        if changes.count > 64, failsLargeCommits.withLock({ $0 }) {
            loadsFail.withLock { $0 = loadsFailAfterAFailure }
            slowFinish.withLock { $0 = true }
            throw StoreError("disk I/O error")
        }
        try inner.commit(changes)
    }
    func finishCommits() {
        if slowFinish.withLock({ s in
            defer { s = false }; return s
        }) {
            Thread.sleep(forTimeInterval: 2)
        }
        inner.finishCommits()
    }
    func events(member: String, after seq: Int64, limit: Int, maxBytes: Int) throws -> [EventRecord] {
        let read = try inner.events(member: member, after: seq, limit: limit, maxBytes: maxBytes)
        eventBytesRead.withLock { $0 += read.reduce(0) { $0 + $1.frame.count } }
        return read
    }
    var eventPosition: Int64 { inner.eventPosition }
    func prune(olderThan cutoff: Timestamp, acknowledged: [String: Int64], settledThrough: Int64, limit: Int) throws -> PruneStep {
        try inner.prune(olderThan: cutoff, acknowledged: acknowledged, settledThrough: settledThrough, limit: limit)
    }
    func updateQuestionLookups() throws -> Bool { try inner.updateQuestionLookups() }
    func forgetQuestions(keeping limits: QuestionsKept, limit: Int) throws -> Bool {
        try inner.forgetQuestions(keeping: limits, limit: limit)
    }
    func question(_ id: QuestionID) throws -> QuestionRecord? { try inner.question(id) }
    func questions(of child: String, status: QuestionStatus?, newestFirst: Bool, after: QuestionPlace?, limit: Int) throws
        -> [QuestionRecord]
    {
        try inner.questions(of: child, status: status, newestFirst: newestFirst, after: after, limit: limit)
    }
}
