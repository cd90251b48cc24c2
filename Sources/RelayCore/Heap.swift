// A binary min-heap for deadlines (question expiry, timed approvals). Entries are not
// removed one by one: a popped entry is checked against the current state instead, and
// pushes compact the heap now and then (`push(_:droppingStale:)`) so that stale entries
// for a far future do not pile up.

struct Heap<Element> {
    private var items: [Element] = []
    private let less: (Element, Element) -> Bool
    /// How many entries the last compaction left.
    private var liveAtCompaction = 0

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

    /// Pushes `e`, and when the heap has doubled since it was last compacted (and holds a
    /// thousand entries at least), keeps only the entries `isLive` accepts: stale entries
    /// for a far future cannot pile up, at an amortized cost of about one check a push.
    mutating func push(_ e: Element, droppingStale isLive: (Element) -> Bool) {
        push(e)
        guard items.count >= 2 * liveAtCompaction + 1024 else { return }
        compact(keeping: isLive)
    }

    /// Keeps only the entries `keep` accepts.
    mutating func compact(keeping keep: (Element) -> Bool) {
        items.removeAll { !keep($0) }
        for i in stride(from: items.count / 2 - 1, through: 0, by: -1) { siftDown(from: i) }
        liveAtCompaction = items.count
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
