// Which question ids the store may hold, kept in memory so that asking with a new id —
// nearly every ask — needs no lookup on disk: a Bloom filter over the ids of every
// question stored, those stored before the store was opened read in the background.
// "Not held" is certain; "may be held" means look it up. An id forgotten since stays in
// the filter (a lookup then finds nothing) until it is built again from what is stored
// (`StoredIDsScan`): its size follows what is kept, about a byte an id, up to a budget.

import CSystem
import Foundation
import RelayProtocol
import Synchronization

struct StoredQuestionIDs: Sendable {
    /// Filled in turn: a full one is followed by one twice its size.
    private var filters: [BloomFilter]
    /// Whether the ids stored before the store was opened are all in. Until then every
    /// id may be held.
    private(set) var complete = false

    /// Sized for about `expected` ids.
    init(expected: Int) { filters = [BloomFilter(capacity: max(expected, 1 << 16))] }

    mutating func insert(_ id: QuestionID) {
        if filters[filters.count - 1].isFull { filters.append(BloomFilter(capacity: filters[filters.count - 1].capacity * 2)) }
        filters[filters.count - 1].insert(id)
    }

    /// All ids stored before the store was opened are in.
    mutating func markComplete() { complete = true }

    /// False only when no question with `id` is stored.
    func mayHold(_ id: QuestionID) -> Bool {
        guard complete else { return true }
        for f in filters where f.mayHold(id) { return true }
        return false
    }

    /// Ids inserted.
    var count: Int { filters.reduce(0) { $0 + $1.count } }
}

/// A Bloom filter over question ids: 8 bits an id at capacity and 4 probes, so that
/// about one id in 40 that was never inserted is taken for one that was.
struct BloomFilter: Sendable {
    private var words: [UInt64]
    private let mask: UInt64
    let capacity: Int
    private(set) var count = 0

    init(capacity: Int) {
        self.capacity = capacity
        var bits = 64
        while bits < capacity * 8 { bits <<= 1 }
        words = [UInt64](repeating: 0, count: bits / 64)
        mask = UInt64(bits - 1)
    }

    var isFull: Bool { count >= capacity }

    mutating func insert(_ id: QuestionID) {
        let (a, b) = Self.hashes(id)
        for i in 0..<4 {
            let bit = (a &+ UInt64(i) &* b) & mask
            words[Int(bit >> 6)] |= 1 << (bit & 63)
        }
        count += 1
    }

    func mayHold(_ id: QuestionID) -> Bool {
        let (a, b) = Self.hashes(id)
        for i in 0..<4 {
            let bit = (a &+ UInt64(i) &* b) & mask
            if words[Int(bit >> 6)] & (1 << (bit & 63)) == 0 { return false }
        }
        return true
    }

    /// Two independent hashes of the id's bits (mixed: clients choose their ids, and
    /// ids that are not random must not crowd into a few bits); the second is odd, so
    /// the probes differ.
    private static func hashes(_ id: QuestionID) -> (UInt64, UInt64) {
        (mix(id.high ^ mix(id.low)), mix(id.low &+ 0x9E37_79B9_7F4A_7C15 ^ id.high) | 1)
    }

    /// SplitMix64's finalizer.
    private static func mix(_ x: UInt64) -> UInt64 {
        var z = x &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The filter of a store, built by a thread that reads the ids stored before it began
/// (at start, and again once the filter holds many more ids than were stored then: ids
/// forgotten since stay in a filter, so a rebuild keeps its size to what is stored).
/// While one is built, ids stored meanwhile go into both; the new one replaces the old
/// once the read is done. The read finds every row at or below the lookup tables' mark
/// in `questionIDs`; the rows above it are listed (`QuestionTail`), and handed to the
/// new filter as it begins; rows indexed while it reads were in one or the other.
final class StoredIDsScan: Sendable {
    private struct State {
        /// What `mayHold` answers from (incomplete, so "may", until the first build is done).
        var current = StoredQuestionIDs(expected: 0)
        /// Being built, if one is.
        var next: StoredQuestionIDs?
        /// Counts the builds begun: a build's thread reads into `next`, and ends it, only
        /// while no other has begun since (one ended by `turnOff` may still be reading).
        var generation = 0
        /// Ids inserted since the current one's build began, and how many it read then.
        var insertedSince = 0
        var builtWith = 0
        var builds = 0
        /// Off: more ids are stored than the filter may hold (`budget`); every id is looked
        /// up, and whether it fits again is seen at the next build due.
        var off = false

        mutating func turnOff() {
            current = StoredQuestionIDs(expected: 0)
            next = nil  // a build under way ends without effect
            off = true
            insertedSince = 0
        }
    }

    private let state = Mutex(State())
    private let cancelled = Atomic<Bool>(false)
    private let path: String
    /// Ids inserted since the last build past which a new one is due, at the least.
    let rebuildMinimum = Atomic<Int>(1 << 20)
    /// The most ids the filter holds (a byte each, and as much again while it grows or is
    /// built anew): past it, a relay that keeps that many questions looks each new id up.
    let budget = Atomic<Int>(4 << 20)
    /// Called by a build's thread after each step of its read, before it takes the ids read
    /// (`false`), and once it has ended its build (`true`); for tests.
    let buildThreadStep = Mutex<(@Sendable (_ ended: Bool) -> Void)?>(nil)

    init(path: String) { self.path = path }

    /// Inserts `ids`; returns whether the filter now holds so many more ids than were
    /// stored when it was built that a new one, from what is stored now, is due (none
    /// being built already; while it is off, whether to see if what is kept fits again).
    func insert<S: Sequence>(_ ids: S) -> Bool where S.Element == QuestionID {
        let budget = budget.load(ordering: .relaxed)
        let minimum = rebuildMinimum.load(ordering: .relaxed)
        return state.withLock { s in
            for id in ids {
                s.insertedSince += 1
                guard !s.off else { continue }
                s.current.insert(id)
                s.next?.insert(id)
            }
            if !s.off && max(s.current.count, s.next?.count ?? 0) > budget { s.turnOff() }
            return s.next == nil
                && (s.off ? s.insertedSince > minimum : s.current.complete && s.insertedSince > max(2 * s.builtWith, minimum))
        }
    }

    /// False only when no question with `id` is stored.
    func mayHold(_ id: QuestionID) -> Bool { state.withLock { $0.current.mayHold(id) } }

    /// Whether a build is done and none is under way, and how many were done (for tests).
    var isSettled: Bool { state.withLock { $0.current.complete && $0.next == nil } }
    var builds: Int { state.withLock { $0.builds } }

    /// Begins a build for about `expected` ids with `listed` (the rows above the mark) in
    /// it, read on a connection and a thread of its own, a step at a time. A failure
    /// leaves the current filter in use (at start: none, so every id is looked up).
    func build(expected: Int, listed: [QuestionID]) {
        let generation = state.withLock { s -> Int? in
            guard expected <= budget.load(ordering: .relaxed) else {  // `expected` counts the listed too
                s.turnOff()
                return nil
            }
            var next = StoredQuestionIDs(expected: expected)
            for id in listed { next.insert(id) }
            s.next = next
            s.off = false
            s.generation += 1
            return s.generation
        }
        guard let generation else { return }
        // Every stored question listed (a new store's case): nothing to read.
        guard expected > listed.count else { return finishBuild(generation, read: 0, listed: listed.count) }
        let thread = Thread { [self] in
            _ = cs_name_thread("stored-ids")  // as `top -H` and `perf` show it
            var read = 0
            defer {
                finishBuild(generation, read: read, listed: listed.count)
                buildThreadStep.withLock { $0 }?(true)
            }
            guard let db = try? SQLiteDatabase(path: path, readOnly: true) else { return read = -1 }
            _ = try? db.exec("PRAGMA busy_timeout = 5000")
            var after: (Int64, Int64)?
            while true {
                if cancelled.load(ordering: .relaxed) { return read = -1 }
                var chunk: [QuestionID] = []
                // One short read a step: a long one would hold back the WAL's checkpoints.
                let ok: Void? = try? db.run(
                    dynamic:
                        "SELECT high, low FROM questionIDs WHERE \(after == nil ? "1" : "(high, low) > (?, ?)") ORDER BY high, low LIMIT 65536",
                    after.map { [.int($0.0), .int($0.1)] } ?? []
                ) { r in
                    chunk.append(QuestionID(high: UInt64(bitPattern: r.int(0)), low: UInt64(bitPattern: r.int(1))))
                    after = (r.int(0), r.int(1))
                }
                guard ok != nil else { return read = -1 }
                buildThreadStep.withLock { $0 }?(false)
                state.withLock { s in
                    guard s.generation == generation else { return }
                    for id in chunk { s.next?.insert(id) }
                }
                read += chunk.count
                if chunk.count < 65536 { return }
            }
        }
        thread.start()
    }

    /// The filter being built becomes the one in use, with `read` ids read from the lookup
    /// table (-1: the read failed, and the current one stays); unless another build has
    /// begun since.
    private func finishBuild(_ generation: Int, read: Int, listed: Int) {
        state.withLock { s in
            guard s.generation == generation, var next = s.next else { return }
            s.next = nil
            guard read >= 0 else { return }
            next.markComplete()
            s.current = next
            s.off = false
            s.builtWith = read + listed
            s.insertedSince = 0
            s.builds += 1
        }
    }

    func cancel() { cancelled.store(true, ordering: .relaxed) }
}
