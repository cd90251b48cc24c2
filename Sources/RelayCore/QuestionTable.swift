// Every question the relay remembers, by id. Each record sits in an entry of its own:
// the table grows with every question asked, and a growing dictionary moves all its
// values each time it doubles — whole records (some 170 bytes each, most of that time
// spent faulting in the new pages) where an entry is one pointer. An answer changes its
// question through the entry it looked up, without a second lookup.

import RelayProtocol
import RelayStore

struct QuestionTable {
    final class Entry {
        var record: QuestionRecord
        init(_ record: QuestionRecord) { self.record = record }
    }

    private var entries: [QuestionID: Entry] = [:]

    subscript(key: QuestionID) -> QuestionRecord? { entries[key]?.record }

    func entry(_ key: QuestionID) -> Entry? { entries[key] }

    /// The status of a question, read in place (copying the record out costs more).
    func status(of key: QuestionID) -> QuestionStatus? { entries[key]?.record.status }

    /// Holds `record` under its id, in place of any record held before.
    mutating func save(_ record: QuestionRecord) { entries[record.key] = Entry(record) }

    mutating func removeValue(forKey key: QuestionID) { entries[key] = nil }

    mutating func reserveCapacity(_ n: Int) { entries.reserveCapacity(n) }
}
