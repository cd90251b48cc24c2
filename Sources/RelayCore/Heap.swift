// A binary min-heap for deadlines (question expiry, timed approvals). Entries are
// never removed early: a popped entry is checked against the current state instead.

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

    mutating func pop() -> Element? {
        guard !items.isEmpty else { return nil }
        items.swapAt(0, items.count - 1)
        let e = items.removeLast()
        var i = 0
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
        return e
    }
}
