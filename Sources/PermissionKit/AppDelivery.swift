// How an event reaches the app's code: a sequence whose iterator counts the event it
// handed out as processed only when the app's loop comes back for the next one, or when
// the loop ends. An event is then never lost to an app stopped at any moment (it is
// handed again on the app's next start), and is handed twice only to an app stopped
// while its loop body was handling it. With several loops on the same events, an event
// is processed once every loop it went to is done with it (see `AskCenter`).
//
// A loop that ends (`break`, `return`) lets its stream go with its iterator. One left with
// `break` in top-level code keeps its iterator (and what it took) until the program ends,
// so closing the center also counts what the closing task's loops took as processed: a
// task closes it once it has handled them (the documented order). A loop of another task
// may still be handling what it took: that is not counted.

import Synchronization

/// One stream of the app's, both ends: the center gives it events, the app's loop takes
/// them. Events given but not yet taken when the stream ends go back to the center.
final class DeliveryStream<Element: Sendable>: Sendable {
    private let continuation: AsyncStream<(seq: Int64, element: Element)>.Continuation
    private let stream: AsyncStream<(seq: Int64, element: Element)>
    private let untaken = Untaken()
    private let inHand = InHand()
    private let settled: @Sendable (Int64) -> Void

    /// Events given and not yet taken by the loop.
    final class Untaken: Sendable {
        let seqs = Mutex<Set<Int64>>([])
    }

    /// Events the loops took and are not done with, each with the task whose loop took it.
    final class InHand: Sendable {
        let seqs = Mutex<[Int64: Int]>([:])
    }

    /// `settled`: the loop is done with an event; `returned`: the stream ended without
    /// the loop taking it; `ended`: the stream ended (after its returns).
    init(
        settled: @escaping @Sendable (Int64) -> Void, returned: @escaping @Sendable (Int64) -> Void,
        ended: @escaping @Sendable () -> Void
    ) {
        (stream, continuation) = AsyncStream<(seq: Int64, element: Element)>.makeStream()
        self.settled = settled
        continuation.onTermination = { [untaken] _ in
            let left = untaken.seqs.withLock { u in
                defer { u = [] }
                return u
            }
            for seq in left.sorted() { returned(seq) }
            ended()
        }
    }

    /// Gives the stream an event; false when the stream had ended (it is not given).
    func give(_ seq: Int64, _ element: Element) -> Bool {
        untaken.seqs.withLock { _ = $0.insert(seq) }
        if case .terminated = continuation.yield((seq, element)) {
            // Ended before: not given. Ended meanwhile: returned with the rest already.
            return untaken.seqs.withLock { $0.remove(seq) } == nil
        }
        return true
    }

    func finish() { continuation.finish() }

    /// The app's end.
    var sequence: AppDelivery<Element> {
        AppDelivery(
            events: stream, finish: finish,
            taken: { [untaken, inHand] seq, task in
                // One the stream's end already returned (it ended between the loop's read and
                // this) counts there alone: settling it again would count it done for a loop
                // of another stream still handling it. It comes again at the next start.
                guard untaken.seqs.withLock({ $0.remove(seq) }) != nil else { return }
                inHand.seqs.withLock { $0[seq] = task }
            },
            processed: { [inHand, settled] seq in
                if inHand.seqs.withLock({ $0.removeValue(forKey: seq) }) != nil { settled(seq) }
            })
    }

    /// The task `task` (`AppDelivery.currentTask`) is done with what its loops took.
    func settle(takenBy task: Int) {
        let done = inHand.seqs.withLock { h -> [Int64] in
            let seqs = h.filter { $0.value == task }.map(\.key)
            for seq in seqs { h[seq] = nil }
            return seqs.sorted()
        }
        for seq in done { settled(seq) }
    }
}

/// Events of a member's stream, as the app's loop takes them.
struct AppDelivery<Element: Sendable>: AsyncSequence, Sendable {
    typealias Failure = Never
    let events: AsyncStream<(seq: Int64, element: Element)>
    /// Ends the stream: what it was given and its loop did not take goes back to the center.
    let finish: @Sendable () -> Void
    /// The loop of the task given took the event.
    let taken: @Sendable (Int64, Int) -> Void
    /// The loop is done with the event (again: no effect).
    let processed: @Sendable (Int64) -> Void

    /// Which task runs this (the same number as long as it lives).
    static var currentTask: Int { withUnsafeCurrentTask { $0?.hashValue } ?? 0 }

    func makeAsyncIterator() -> Iterator {
        Iterator(events: events.makeAsyncIterator(), handed: Handed(processed, finish: finish), taken: taken)
    }

    struct Iterator: AsyncIteratorProtocol {
        var events: AsyncStream<(seq: Int64, element: Element)>.Iterator
        let handed: Handed
        let taken: @Sendable (Int64, Int) -> Void

        mutating func next() async -> Element? {
            handed.settle()  // the loop is back: the app is done with what it was handed
            guard let (seq, element) = await events.next() else { return nil }
            taken(seq, AppDelivery.currentTask)
            handed.seq = seq
            return element
        }
    }

    /// The seq handed out and not yet settled; a loop left with `break`, `return` or a
    /// throw settles it as its iterator goes, and ends the stream: nothing more is given
    /// to a loop that is gone (it would hold it back for good).
    final class Handed {
        var seq: Int64?
        let processed: @Sendable (Int64) -> Void
        let finish: @Sendable () -> Void

        init(_ processed: @escaping @Sendable (Int64) -> Void, finish: @escaping @Sendable () -> Void) {
            (self.processed, self.finish) = (processed, finish)
        }

        func settle() {
            if let seq { processed(seq) }
            seq = nil
        }

        deinit {
            settle()
            finish()
        }
    }
}

/// A sequence whose events are taken only once a loop starts on it: each iteration opens
/// a stream of its own.
struct LazyDelivery<Element: Sendable>: AsyncSequence, Sendable {
    typealias Failure = Never
    let open: @Sendable () -> AppDelivery<Element>

    func makeAsyncIterator() -> AppDelivery<Element>.Iterator { open().makeAsyncIterator() }
}
