// Which question ids the store may hold, kept in memory so that asking with a new id —
// nearly every ask — needs no lookup on disk: a Bloom filter over the ids of every
// question stored, those stored before the store was opened read in the background.
// "Not held" is certain; "may be held" means look it up. An id forgotten since stays in
// the filter (a lookup then finds nothing): it grows by about two bytes per question
// stored while the store is open, and is rebuilt from what is stored at the next start.

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

    var memoryBytes: Int { filters.reduce(0) { $0 + $1.memoryBytes } }
}

/// A Bloom filter over question ids: 16 bits an id at capacity and 4 probes, so that
/// about one id in 400 that was never inserted is taken for one that was.
struct BloomFilter: Sendable {
    private var words: [UInt64]
    private let mask: UInt64
    let capacity: Int
    private(set) var count = 0

    init(capacity: Int) {
        self.capacity = capacity
        var bits = 64
        while bits < capacity * 16 { bits <<= 1 }
        words = [UInt64](repeating: 0, count: bits / 64)
        mask = UInt64(bits - 1)
    }

    var isFull: Bool { count >= capacity }
    var memoryBytes: Int { words.count * 8 }

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

/// The filter of a store, and the thread that reads into it the ids stored before the
/// store was opened: every row at or below the lookup tables' mark is in `questionIDs`
/// (the rows above it are listed, and inserted when listed); rows indexed while it
/// reads were inserted when stored.
final class StoredIDsScan: Sendable {
    let ids: Mutex<StoredQuestionIDs>
    private let cancelled = Atomic<Bool>(false)

    init(expected: Int) { ids = Mutex(StoredQuestionIDs(expected: expected)) }

    /// Starts reading `path`'s lookup table by id, a step at a time, on a connection and
    /// a thread of its own. A failure leaves the filter incomplete: every id is then
    /// looked up, as before it was built.
    func start(path: String) {
        let thread = Thread { [self] in
            guard let db = try? SQLiteDatabase(path: path, readOnly: true) else { return }
            _ = try? db.exec("PRAGMA busy_timeout = 5000")
            var after: (Int64, Int64) = (.min, .min)
            var first = true
            while !cancelled.load(ordering: .relaxed) {
                var chunk: [QuestionID] = []
                // One short read a step: a long one would hold back the WAL's checkpoints.
                let read: Void? = try? db.run(
                    dynamic:
                        "SELECT high, low FROM questionIDs WHERE \(first ? "1" : "(high, low) > (?, ?)") ORDER BY high, low LIMIT 65536",
                    first ? [] : [.int(after.0), .int(after.1)]
                ) { r in
                    chunk.append(QuestionID(high: UInt64(bitPattern: r.int(0)), low: UInt64(bitPattern: r.int(1))))
                    after = (r.int(0), r.int(1))
                }
                guard read != nil else { return }
                first = false
                ids.withLock { ids in
                    for id in chunk { ids.insert(id) }
                    if chunk.count < 65536 { ids.markComplete() }
                }
                if chunk.count < 65536 { return }
            }
        }
        thread.name = "stored-ids"
        thread.start()
    }

    func cancel() { cancelled.store(true, ordering: .relaxed) }
}
