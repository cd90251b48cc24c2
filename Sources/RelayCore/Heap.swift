// A binary min-heap for deadlines (question expiry, timed approvals). Entries are not
// removed one by one: a popped entry is checked against the current state instead, and
// the owner compacts the heap now and then (`compact`) so that stale entries for a far
// future do not pile up.

struct Heap<Element> {
    private var items: [Element] = []
    private let less: (Element, Element) -> Bool

    init(by less: @escaping (Element, Element) -> Bool) { self.less = less }

    var top: Element? { items.first }
    var count: Int { items.count }

    mutating func push(_ e: Element) {
        items.append(e)
        var i = items.count - 1
        while i > 0 {
            let p = (i - 1) / 2
            guard less(items[i], items[p]) else { break }
            items.swapAt(i, p)
            i = p
        }
    }

    /// Keeps only the entries `keep` accepts.
    mutating func compact(keeping keep: (Element) -> Bool) {
        items.removeAll { !keep($0) }
        for i in stride(from: items.count / 2 - 1, through: 0, by: -1) { siftDown(from: i) }
    }

    mutating func pop() -> Element? {
        guard !items.isEmpty else { return nil }
        items.swapAt(0, items.count - 1)
        let e = items.removeLast()
        siftDown(from: 0)
        return e
    }

    private mutating func siftDown(from start: Int) {
        var i = start
        while true {
            let l = 2 * i + 1
            let r = l + 1
            var m = i
            if l < items.count && less(items[l], items[m]) { m = l }
            if r < items.count && less(items[r], items[m]) { m = r }
            if m == i { break }
            items.swapAt(i, m)
            i = m
        }
    }
}
