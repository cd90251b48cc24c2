// The writer's jobs: a commit handed over during a pruning step goes before that step's
// questions' upkeep, so that it waits for one part of the step, not both.

import Dispatch
import Foundation
import RelayModel
import RelayProtocol
import RelayStore
import Synchronization
import XCTest

@testable import RelayServer

final class CommitterTests: XCTestCase {
    func testACommitHandedOverDuringAPruningStepGoesBeforeItsQuestionsUpkeep() throws {
        let store = OrderedStore()
        let committer = try Committer(store: store)
        defer { committer.stop() }
        committer.submit(pruneJob)
        store.pruneStarted.wait()
        committer.submit(.commit([.family("smiths")]))
        store.pruneMayEnd.signal()
        committer.waitUntilIdle()

        XCTAssertEqual(store.calls.withLock { $0 }, ["prune", "commit", "maintain"])
        let outcomes = committer.takeOutcomes()
        XCTAssertEqual(outcomes.count, 2, "one outcome for each job handed over")
        guard case .committed = outcomes.first else { return XCTFail("the commit's outcome comes first: \(outcomes)") }
        guard case .pruned(let step) = outcomes.last else { return XCTFail("then the pruning step's: \(outcomes)") }
        XCTAssertEqual(step.through, ["alex": 7], "what the pruning part dropped")
        XCTAssertTrue(step.more, "more upkeep is due, so more steps are")
    }

    func testAFailedUpkeepStillReportsWhatThePruningPartDropped() throws {
        let store = OrderedStore()
        store.upkeepFails.withLock { $0 = true }
        let committer = try Committer(store: store)
        defer { committer.stop() }
        store.pruneMayEnd.signal()
        committer.submit(pruneJob)
        committer.waitUntilIdle()

        let outcomes = committer.takeOutcomes()
        XCTAssertEqual(outcomes.count, 1)
        guard case .pruneFailed(let error, let done)? = outcomes.first else { return XCTFail("\(outcomes)") }
        XCTAssertTrue("\(error)".contains("disk I/O error"), "\(error)")
        XCTAssertEqual(done?.through, ["alex": 7], "the core must learn what went all the same")
    }

    private let pruneJob = Committer.Job.prune(
        olderThan: Timestamp(milliseconds: 0), acknowledged: ["alex": 7], settledThrough: 1,
        questionsKept: QuestionsKept(count: 10), limit: 100)
}

/// A store that records the order of the writer's calls, whose pruning step waits to be let
/// end, and whose questions' upkeep always has more to do (or fails).
private final class OrderedStore: RelayStore {
    let inner = MemoryStore()
    let calls = Mutex<[String]>([])
    let pruneStarted = DispatchSemaphore(value: 0)
    let pruneMayEnd = DispatchSemaphore(value: 0)
    let upkeepFails = Mutex(false)

    func load() throws -> StoreSnapshot { try inner.load() }
    func commit(_ changes: [Change]) throws {
        calls.withLock { $0.append("commit") }
        try inner.commit(changes)
    }
    func events(member: String, after seq: Int64, limit: Int) throws -> [EventRecord] {
        try inner.events(member: member, after: seq, limit: limit)
    }
    var eventPosition: Int64 { inner.eventPosition }
    func prune(olderThan cutoff: Timestamp, acknowledged: [String: Int64], settledThrough: Int64, limit: Int) throws -> PruneStep {
        calls.withLock { $0.append("prune") }
        pruneStarted.signal()
        pruneMayEnd.wait()
        var step = PruneStep()
        step.through = acknowledged
        return step
    }
    func maintainQuestions(keeping limits: QuestionsKept, limit: Int) throws -> Bool {
        calls.withLock { $0.append("maintain") }
        if upkeepFails.withLock({ $0 }) { throw StoreError("disk I/O error") }
        return true
    }
    func question(_ id: QuestionID) throws -> QuestionRecord? { try inner.question(id) }
    func questions(of child: String, status: QuestionStatus?, newestFirst: Bool, after: QuestionPlace?, limit: Int) throws
        -> [QuestionRecord]
    {
        try inner.questions(of: child, status: status, newestFirst: newestFirst, after: after, limit: limit)
    }
}
