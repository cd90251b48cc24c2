// The writer's jobs: a commit handed over during a part of a pruning step goes before the
// step's next part, so that it waits for one part of the step, not all three; the turns
// handed over during a commit share the next; a failed commit drops those made on it.

import Dispatch
import Foundation
import RelayModel
import RelayProtocol
import RelayStore
import Synchronization
import XCTest

@testable import RelayServer

final class CommitterTests: XCTestCase {
    func testACommitHandedOverDuringAPartOfAPruningStepGoesBeforeItsNextPart() throws {
        let store = OrderedStore()
        let committer = try Committer(store: store)
        defer { committer.stop() }
        defer { store.letEveryGateOpen() }  // before the stop: a failed test never hangs
        committer.submit(pruneJob)
        XCTAssertEqual(store.prune.started.wait(timeout: .now() + 10), .success)
        committer.submit(.commit([.family("smiths")]))
        store.prune.mayEnd.signal()
        XCTAssertEqual(store.lookups.started.wait(timeout: .now() + 10), .success)
        committer.submit(.commit([.family("joneses")]))
        store.lookups.mayEnd.signal()
        committer.waitUntilIdle()

        XCTAssertEqual(store.calls.withLock { $0 }, ["prune", "commit", "lookups", "commit", "forget"])
        let outcomes = committer.takeOutcomes()
        XCTAssertEqual(outcomes.count, 3, "one outcome for each job handed over")
        guard case .committed = outcomes[0], case .committed = outcomes[1] else {
            return XCTFail("the commits' outcomes come first: \(outcomes)")
        }
        guard case .pruned(let step) = outcomes[2] else { return XCTFail("then the pruning step's: \(outcomes)") }
        XCTAssertEqual(step.through, ["alex": 7], "what the pruning part dropped")
        XCTAssertTrue(step.more, "more upkeep is due, so more steps are")
    }

    /// A part of a pruning step may make the writer's own checkpoint due (a commit's
    /// transaction: the WAL's length). It runs before the writer takes the commits queued
    /// behind that part, so that the turns handed over while it runs share their commit
    /// rather than wait for the one after it.
    func testTheCheckpointAPartOfAPruningStepMadeDueRunsBeforeTheNextCommitIsTaken() throws {
        for part in ["prune", "lookups"] {
            let store = OrderedStore()
            let committer = try Committer(store: store)
            defer { committer.stop() }
            defer { store.letEveryGateOpen() }
            let gate = part == "prune" ? store.prune : store.lookups
            if part == "lookups" { store.prune.mayEnd.signal() }
            committer.submit(pruneJob)
            XCTAssertEqual(gate.started.wait(timeout: .now() + 10), .success)
            store.holdsFinish.withLock { $0 = true }
            committer.submit(.commit([.family("smiths")]))
            gate.mayEnd.signal()
            XCTAssertEqual(store.finish.started.wait(timeout: .now() + 10), .success)
            store.holdsFinish.withLock { $0 = false }
            committer.submit(.commit([.family("joneses")]))
            store.finish.mayEnd.signal()
            store.lookups.mayEnd.signal()
            committer.waitUntilIdle()

            let calls = store.calls.withLock { $0 }
            let at = calls.firstIndex(of: part) ?? 0
            XCTAssertEqual(Array(calls[at...].prefix(3)), [part, "finish", "commit"], "\(calls)")
            XCTAssertEqual(
                store.transactions.withLock { $0 }, [["smiths", "joneses"]], "both turns in the commit after the checkpoint (\(part))")
        }
    }

    func testAFailedPartOfTheUpkeepStillReportsWhatThePruningPartDropped() throws {
        for failing in ["lookups", "forget"] {
            let store = OrderedStore()
            store.failing.withLock { $0 = failing }
            let committer = try Committer(store: store)
            defer { committer.stop() }
            defer { store.letEveryGateOpen() }
            store.prune.mayEnd.signal()
            store.lookups.mayEnd.signal()
            committer.submit(pruneJob)
            committer.waitUntilIdle()

            XCTAssertEqual(store.calls.withLock { $0 }.last, failing, "nothing after the part that failed")
            let outcomes = committer.takeOutcomes()
            XCTAssertEqual(outcomes.count, 1)
            guard case .pruneFailed(let error, let done)? = outcomes.first else { return XCTFail("\(outcomes)") }
            XCTAssertTrue("\(error)".contains("disk I/O error"), "\(error)")
            XCTAssertEqual(done?.through, ["alex": 7], "the core must learn what went all the same")
        }
    }

    /// The store finishes a commit (the writer's own checkpoint, when due) once its outcome
    /// is out, and the writer is busy until then: the loop commits nothing itself meanwhile.
    func testACommitsOutcomeIsOutBeforeTheStoreFinishesIt() throws {
        let store = OrderedStore()
        store.holdsFinish.withLock { $0 = true }
        let committer = try Committer(store: store)
        defer { committer.stop() }
        defer { store.letEveryGateOpen() }
        committer.submit(.commit([.family("smiths")]))
        XCTAssertEqual(store.finish.started.wait(timeout: .now() + 10), .success, "the store finishes the commit")
        guard case .committed? = committer.takeOutcomes().first else { return XCTFail("the outcome is out") }
        XCTAssertFalse(committer.isIdle, "still finishing")
        store.finish.mayEnd.signal()
        committer.waitUntilIdle()
        XCTAssertTrue(committer.isIdle)
        XCTAssertEqual(store.calls.withLock { $0 }, ["commit", "finish"])
    }

    func testTheTurnsHandedOverDuringACommitShareTheNextTransaction() throws {
        let store = OrderedStore()
        store.holdsCommit.withLock { $0 = true }
        let committer = try Committer(store: store)
        defer { committer.stop() }
        defer { store.letEveryGateOpen() }
        committer.submit(.commit([.family("smiths")]))
        XCTAssertEqual(store.commitGate.started.wait(timeout: .now() + 10), .success)
        for family in ["joneses", "browns", "greens"] { committer.submit(.commit([.family(family)])) }
        committer.submit(pruneJob)  // not overtaken: the turns after it wait for it
        committer.submit(.commit([.family("whites")]))
        store.holdsCommit.withLock { $0 = false }
        store.prune.mayEnd.signal()
        store.lookups.mayEnd.signal()
        store.commitGate.mayEnd.signal()
        committer.waitUntilIdle()

        XCTAssertEqual(store.transactions.withLock { $0 }, [["smiths"], ["joneses", "browns", "greens"], ["whites"]])
        XCTAssertEqual(store.calls.withLock { $0 }, ["commit", "commit", "prune", "commit", "lookups", "forget"])
        let outcomes = committer.takeOutcomes().map { outcome -> String in
            switch outcome {
            case .committed(let turns): "\(turns)"
            case .pruned: "pruned"
            default: "\(outcome)"
            }
        }
        XCTAssertEqual(outcomes, ["1", "3", "1", "pruned"], "an outcome per transaction, saying how many turns it held")
    }

    /// The turns handed over after a turn whose commit fails were made on what it would
    /// have stored: none is committed until the loop has reloaded and resumes the writer.
    func testAFailedCommitDropsTheTurnsHandedOverUntilResumed() throws {
        let store = OrderedStore()
        store.holdsCommit.withLock { $0 = true }
        store.failing.withLock { $0 = "commit" }
        let committer = try Committer(store: store)
        defer { committer.stop() }
        defer { store.letEveryGateOpen() }
        committer.submit(.commit([.family("smiths")]))
        XCTAssertEqual(store.commitGate.started.wait(timeout: .now() + 10), .success)
        committer.submit(.commit([.family("joneses")]))
        committer.submit(pruneJob)  // not a turn: it goes on
        store.holdsCommit.withLock { $0 = false }
        store.prune.mayEnd.signal()
        store.lookups.mayEnd.signal()
        store.commitGate.mayEnd.signal()
        committer.waitUntilIdle()
        store.failing.withLock { $0 = nil }
        committer.submit(.commit([.family("browns")]))  // before the loop has heard
        committer.waitUntilIdle()

        let outcomes = committer.takeOutcomes()
        guard outcomes.count == 2, case .commitFailed = outcomes[0], case .pruned = outcomes[1] else {
            return XCTFail("the failure, then the pruning step's: \(outcomes)")
        }
        XCTAssertEqual(store.calls.withLock { $0 }, ["commit", "prune", "lookups", "forget"], "no commit after the failed one")
        committer.resume()
        committer.submit(.commit([.family("greens")]))
        committer.waitUntilIdle()
        XCTAssertEqual(store.transactions.withLock { $0 }, [["greens"]])
        guard case .committed(1)? = committer.takeOutcomes().first else { return XCTFail("committed once resumed") }
    }

    private let pruneJob = Committer.Job.prune(
        olderThan: Timestamp(milliseconds: 0), acknowledged: ["alex": 7], settledThrough: 1,
        questionsKept: QuestionsKept(count: 10), limit: 100)
}

/// A store that records the order of the writer's calls and the families each commit
/// names, whose pruning step and lookup tables' step (and, if it `holdsFinish`, the
/// finishing of a commit; if it `holdsCommit`, a commit) each wait to be let end, and whose questions' upkeep always has more to do (or fails in the part named
/// `failing`).
private final class OrderedStore: RelayStore {
    struct Gate {
        let started = DispatchSemaphore(value: 0)
        let mayEnd = DispatchSemaphore(value: 0)

        func pass() {
            started.signal()
            mayEnd.wait()
        }
    }

    let inner = MemoryStore()
    let calls = Mutex<[String]>([])
    let prune = Gate()
    let lookups = Gate()
    let finish = Gate()
    let commitGate = Gate()
    let holdsFinish = Mutex(false)
    let holdsCommit = Mutex(false)
    let transactions = Mutex<[[String]]>([])
    let failing = Mutex<String?>(nil)

    func load() throws -> StoreSnapshot { try inner.load() }
    func commit(_ changes: [Change]) throws {
        if holdsCommit.withLock({ $0 }) { commitGate.pass() }
        try call("commit")
        transactions.withLock {
            $0.append(
                changes.compactMap {
                    guard case .family(let id) = $0 else { return nil }
                    return id
                })
        }
        try inner.commit(changes)
    }
    func events(member: String, after seq: Int64, limit: Int, maxBytes: Int) throws -> [EventRecord] {
        try inner.events(member: member, after: seq, limit: limit, maxBytes: maxBytes)
    }
    var eventPosition: Int64 { inner.eventPosition }
    func prune(olderThan cutoff: Timestamp, acknowledged: [String: Int64], settledThrough: Int64, limit: Int) throws -> PruneStep {
        calls.withLock { $0.append("prune") }
        prune.pass()
        var step = PruneStep()
        step.through = acknowledged
        return step
    }
    func updateQuestionLookups() throws -> Bool {
        try call("lookups")
        lookups.pass()
        return true
    }
    func forgetQuestions(keeping limits: QuestionsKept, limit: Int) throws -> Bool {
        try call("forget")
        return true
    }
    func finishCommits() {
        guard holdsFinish.withLock({ $0 }) else { return }
        calls.withLock { $0.append("finish") }
        finish.pass()
    }
    func letEveryGateOpen() {
        for gate in [prune, lookups, finish, commitGate] { gate.mayEnd.signal() }
    }
    private func call(_ name: String) throws {
        calls.withLock { $0.append(name) }
        if failing.withLock({ $0 }) == name { throw StoreError("disk I/O error") }
    }
    func question(_ id: QuestionID) throws -> QuestionRecord? { try inner.question(id) }
    func questions(of child: String, status: QuestionStatus?, newestFirst: Bool, after: QuestionPlace?, limit: Int) throws
        -> [QuestionRecord]
    {
        try inner.questions(of: child, status: status, newestFirst: newestFirst, after: after, limit: limit)
    }
}
