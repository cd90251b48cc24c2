// A child's question ids in the order they were first asked, where forgetting the
// oldest finished ones costs O(1) amortized per ask instead of a pass over them all.

import RelayProtocol

struct QuestionOrder: Sequence {
    /// Forgotten ids leave a nil until the next compaction.
    private var slots: [QuestionID?] = []
    /// Every slot before it is nil.
    private var head = 0
    private(set) var count = 0

    mutating func append(_ id: QuestionID) {
        slots.append(id)
        count += 1
    }

    func makeIterator() -> some IteratorProtocol<QuestionID> { slots[head...].lazy.compactMap { $0 }.makeIterator() }

    /// Forgets the oldest ids that `canForget` allows while `over` holds of the count left
    /// (and of whatever `canForget` keeps track of); returns them.
    mutating func forgetOldest(while over: (Int) -> Bool, where canForget: (QuestionID) -> Bool) -> [QuestionID] {
        guard over(count) else { return [] }
        var forgotten: [QuestionID] = []
        var i = head
        while over(count) && i < slots.count {
            if let id = slots[i], canForget(id) {
                slots[i] = nil
                count -= 1
                forgotten.append(id)
            }
            i += 1
        }
        while head < slots.count && slots[head] == nil { head += 1 }
        // Compact once the nils outnumber the ids, so scans stay proportional to what is kept.
        if slots.count - count > Swift.max(64, count) {
            slots = slots[head...].filter { $0 != nil }
            head = 0
        }
        return forgotten
    }
}
