// How an event reaches the app's code: a sequence whose iterator records the event it
// handed out as processed only when the app's loop comes back for the next one, or when
// the loop ends. An event is then never lost to an app stopped at any moment (it is
// handed again on the app's next start), and is handed twice only to an app stopped
// while its loop body was handling it.

/// Events of a member's stream with their seqs, as the app's loop takes them.
struct AppDelivery<Element: Sendable>: AsyncSequence, Sendable {
    typealias Failure = Never
    let events: AsyncStream<(seq: Int64, element: Element)>
    /// Records a seq as processed (idempotent: several loops may hand out the same event).
    let processed: @Sendable (Int64) -> Void

    func makeAsyncIterator() -> Iterator {
        Iterator(events: events.makeAsyncIterator(), handed: Handed(processed))
    }

    struct Iterator: AsyncIteratorProtocol {
        var events: AsyncStream<(seq: Int64, element: Element)>.Iterator
        let handed: Handed

        mutating func next() async -> Element? {
            handed.settle()  // the loop is back: the app is done with what it was handed
            guard let (seq, element) = await events.next() else { return nil }
            handed.seq = seq
            return element
        }
    }

    /// The seq handed out and not yet settled; a loop left with `break`, `return` or a
    /// throw settles it as its iterator goes.
    final class Handed {
        var seq: Int64?
        let processed: @Sendable (Int64) -> Void

        init(_ processed: @escaping @Sendable (Int64) -> Void) { self.processed = processed }

        func settle() {
            if let seq { processed(seq) }
            seq = nil
        }

        deinit { settle() }
    }
}
