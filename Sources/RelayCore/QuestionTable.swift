// The questions the core holds, by id: the pending ones, and finished ones until what
// finished them is committed (then the store has them: `QuestionArchive`). Each record
// sits in an entry of its own: a growing dictionary moves all its values each time it
// doubles — whole records where an entry is one pointer. An answer changes its question
// through the entry it looked up, without a second lookup.
//
// The entries are spread over many small dictionaries rather than one: a dictionary
// doubles all at once, rehashing every id it holds within one loop turn, which holds
// every client up for as long as that takes, while small ones double one at a time,
// each about a 256th of that.

import RelayProtocol
import RelayModel

struct QuestionTable {
    final class Entry {
        var record: QuestionRecord
        /// The batch of changes (`RelayCore.takes`) that stores the question's latest change.
        var storedIn: Int64 = 0

        init(_ record: QuestionRecord) { self.record = record }
    }

    private static let shardBits = 8
    private var shards = [[QuestionID: Entry]](repeating: [:], count: 1 << shardBits)
    /// The highest row given to a question (`QuestionRecord.row`) or held by the store.
    private var lastRow: Int64 = 0

    /// The shard of `key`: its bits mixed, since clients choose ids and need not make them random.
    @inline(__always) private static func shard(_ key: QuestionID) -> Int {
        Int(truncatingIfNeeded: ((key.high ^ key.low) &* 0x9E37_79B9_7F4A_7C15) >> (64 - UInt64(shardBits)))
    }

    subscript(key: QuestionID) -> QuestionRecord? { entry(key)?.record }

    func entry(_ key: QuestionID) -> Entry? { shards[Self.shard(key)][key] }

    /// Holds `record` under its id, in place of any record held before (keeping its place
    /// in the order of asking).
    mutating func save(_ record: QuestionRecord) {
        if let entry = entry(record.key) { entry.record = record } else { insert(record) }
    }

    /// Holds the record of a question asked for the first time (one lookup fewer than `save`).
    mutating func insert(_ record: QuestionRecord) {
        shards[Self.shard(record.key)][record.key] = Entry(record)
    }

    /// Lets the question `key` go.
    mutating func removeValue(forKey key: QuestionID) {
        shards[Self.shard(key)].removeValue(forKey: key)
    }

    /// A row for a question asked for the first time: above every row given or stored.
    mutating func newRow() -> Int64 {
        lastRow += 1
        return lastRow
    }

    /// Notes rows the store holds or has held (given before the relay started).
    mutating func noteRows(upTo row: Int64) { lastRow = max(lastRow, row) }

    /// Makes room for about `n` questions in all.
    mutating func reserveCapacity(_ n: Int) {
        let each = n >> Self.shardBits + (n > 0 ? 1 : 0)
        for i in shards.indices { shards[i].reserveCapacity(each + each / 8) }
    }

    /// Every record it holds, in no particular order.
    var records: [QuestionRecord] { shards.flatMap { $0.values.map(\.record) } }

    /// How many questions it holds (for tests).
    var count: Int { shards.reduce(0) { $0 + $1.count } }

    /// How many the fullest shard holds (for tests).
    var largestShardCount: Int { shards.lazy.map(\.count).max() ?? 0 }
}
