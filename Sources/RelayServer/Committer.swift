// The store's writer: a thread that commits the loop's turns of changes (and runs its
// pruning steps) in the order given, while the loop goes on reading and deciding. The loop
// holds each turn's replies until it hears the turn is committed. The turns handed over
// while one transaction is being committed all go into the next, which the writer starts
// as soon as the last ends, so the busier the relay, the more turns share a transaction
// (group commit). The thread wakes the loop through a pipe in its epoll set.
//
// A pruning step is three jobs: its events, then the questions' lookup tables, then their
// forgetting, each queued behind any commit handed over meanwhile (so its outcome comes
// after that commit's). Each part takes milliseconds under load, and a commit that waited
// for all of them set the tail of the cycle's latency.

import CSystem
import Foundation
import Glibc
import RelayModel
import RelayProtocol
import RelayStore

final class Committer: @unchecked Sendable {
    enum Job {
        /// A turn's changes.
        case commit([Change])
        /// A step of pruning events, and of the questions' upkeep (forgetting those past
        /// `questionsKept`); one outcome for its three parts.
        case prune(olderThan: Timestamp, acknowledged: [String: Int64], settledThrough: Int64, questionsKept: QuestionsKept, limit: Int)
        /// The other parts of a pruning step that dropped `after`, queued by the writer:
        /// the questions' lookup tables, then their forgetting.
        case updateLookups(after: PruneStep, questionsKept: QuestionsKept, limit: Int)
        case forget(after: PruneStep, questionsKept: QuestionsKept, limit: Int)
    }

    enum Outcome {
        /// The next `turns` commit jobs, in one transaction.
        case committed(turns: Int)
        /// The transaction of the next commit jobs failed; those handed over since are
        /// dropped, uncommitted, until `resume`.
        case commitFailed(any Error)
        case pruned(PruneStep)
        /// A pruning step failed, or a part of the questions' upkeep after it (`done`: what
        /// the pruning step did drop, which the core must learn of all the same).
        case pruneFailed(any Error, done: PruneStep?)
    }

    private let store: RelayStore
    /// Wakes the loop once something waits for it.
    let wakeup: WakePipe
    // Guarded by `condition`.
    private let condition = NSCondition()
    private var jobs: [Job] = []
    private var outcomes: [Outcome] = []
    private var busy = false
    /// Since a commit failed: the turns handed over are dropped, made on what was not stored.
    private var dropping = false
    private var stopping = false
    private var running = true

    init(store: RelayStore) throws {
        self.store = store
        wakeup = try WakePipe()
        Thread { [self] in run() }.start()
    }

    /// Queues a job; its outcome comes back through `takeOutcomes`, in the order jobs end.
    func submit(_ job: Job) {
        condition.lock()
        if case .commit = job, dropping {
            condition.unlock()
            return
        }
        jobs.append(job)
        condition.broadcast()
        condition.unlock()
    }

    /// The outcomes of the jobs done since the last call, in the order they ended.
    func takeOutcomes() -> [Outcome] {
        wakeup.drain()
        condition.lock()
        defer { condition.unlock() }
        let done = outcomes
        outcomes.removeAll(keepingCapacity: true)
        return done
    }

    /// After a failed commit, once the loop has reloaded its state from the store: turns
    /// handed over from now on are committed again.
    func resume() {
        condition.lock()
        dropping = false
        condition.unlock()
    }

    /// Whether no job is queued or under way: the store is then the caller's to use.
    var isIdle: Bool {
        condition.lock()
        defer { condition.unlock() }
        return jobs.isEmpty && !busy
    }

    /// Waits until every job submitted is done (its outcome then waits in `takeOutcomes`).
    func waitUntilIdle() {
        condition.lock()
        while !jobs.isEmpty || busy { condition.wait() }
        condition.unlock()
    }

    /// Finishes the jobs queued, then ends the thread.
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        while running { condition.wait() }
        condition.unlock()
    }

    private func run() {
        _ = cs_name_thread("store-writer")  // as `top -H` and `perf` show it
        condition.lock()
        while true {
            while jobs.isEmpty && !stopping { condition.wait() }
            guard !jobs.isEmpty else { break }
            let job = jobs.removeFirst()
            busy = true
            condition.unlock()
            let outcome: Outcome
            switch job {
            case .commit(var changes):
                // With the turns queued behind it, up to the next other job.
                condition.lock()
                let behind = jobs.prefix { if case .commit = $0 { true } else { false } }
                for case .commit(let more) in behind { changes += more }
                let turns = 1 + behind.count
                jobs.removeFirst(behind.count)
                condition.unlock()
                do {
                    try store.commit(changes)
                    outcome = .committed(turns: turns)
                } catch {
                    outcome = .commitFailed(error)
                    condition.lock()
                    dropping = true
                    jobs.removeAll { if case .commit = $0 { true } else { false } }
                    condition.unlock()
                }
            case .prune(let cutoff, let acknowledged, let settled, let questionsKept, let limit):
                do {
                    let step = try store.prune(olderThan: cutoff, acknowledged: acknowledged, settledThrough: settled, limit: limit)
                    // A checkpoint this part made due runs before the commits queued behind it
                    // are taken, not at the start of their transaction: turns handed over
                    // while it runs then share that commit.
                    store.finishCommits()
                    queueNext(.updateLookups(after: step, questionsKept: questionsKept, limit: limit))
                    continue  // its outcome comes with the last part's
                } catch {
                    outcome = .pruneFailed(error, done: nil)
                }
            case .updateLookups(var step, let questionsKept, let limit):
                do {
                    if try store.updateQuestionLookups() { step.more = true }
                    store.finishCommits()
                    queueNext(.forget(after: step, questionsKept: questionsKept, limit: limit))
                    continue
                } catch {
                    outcome = .pruneFailed(error, done: step)
                }
            case .forget(var step, let questionsKept, let limit):
                do {
                    if try store.forgetQuestions(keeping: questionsKept, limit: limit) { step.more = true }
                    outcome = .pruned(step)
                } catch {
                    outcome = .pruneFailed(error, done: step)
                }
            }
            condition.lock()
            outcomes.append(outcome)
            wakeup.wake()
            // Once the outcome is out: the replies it releases need not wait for this.
            condition.unlock()
            store.finishCommits()
            condition.lock()
            busy = false
            condition.broadcast()
        }
        running = false
        condition.broadcast()
        condition.unlock()
    }

    /// Queues the next part of a job behind those waiting, and takes the lock again for
    /// the writer's loop (which finds the queue not empty: `busy` stays true throughout).
    private func queueNext(_ job: Job) {
        condition.lock()
        jobs.append(job)
    }
}
