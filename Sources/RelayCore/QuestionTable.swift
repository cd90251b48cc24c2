// Every question the relay remembers, by id. Each record sits in a box of its own: the
// table grows with every question asked, and a growing dictionary moves all its values
// each time it doubles — whole records (some 170 bytes each, most of that time spent
// faulting in the new pages) where a box is one pointer.

import RelayProtocol
import RelayStore

struct QuestionTable {
    private final class Box {
        var record: QuestionRecord
        init(_ record: QuestionRecord) { self.record = record }
    }

    private var boxes: [QuestionID: Box] = [:]

    subscript(key: QuestionID) -> QuestionRecord? {
        get { boxes[key]?.record }
        set {
            guard let newValue else {
                boxes[key] = nil
                return
            }
            if let box = boxes[key] { box.record = newValue } else { boxes[key] = Box(newValue) }
        }
    }

    /// The status of a question, read in place (copying the record out costs more).
    func status(of key: QuestionID) -> QuestionStatus? { boxes[key]?.record.status }

    mutating func removeValue(forKey key: QuestionID) { boxes[key] = nil }

    mutating func reserveCapacity(_ n: Int) { boxes.reserveCapacity(n) }
}
