// When the event loop waits for events by polling instead of sleeping. Waking a sleeping
// thread takes the scheduler's time and costs the caches the thread had: at light,
// back-and-forth traffic, a good part of a request's latency. So right after a wait that
// ended within the window — traffic dense enough that the next event is likely as close —
// the loop polls for up to the window before it sleeps; after a longer wait it sleeps at
// once, so a quiet relay costs nothing.

import Glibc

/// Waits for events, polling first when the last wait ended within the window.
public struct SpinPolicy: Sendable {
    /// The relay's window unless configured otherwise: long enough to span a client's turn
    /// on a slow virtual machine, where a wait for the next request that outlasts the window
    /// ends in a sleep whose wake-up, tens of µs there, keeps the next wait long as well.
    public static let defaultMicroseconds = 200
    /// How long a wait polls before sleeping; 0 never polls.
    let windowNanos: Int
    private var dense = false

    public init(windowMicroseconds: Int) { windowNanos = max(0, windowMicroseconds) * 1000 }

    /// Whether the next wait should poll for up to `windowNanos` before sleeping.
    var spins: Bool { windowNanos > 0 && dense }

    /// Notes how a wait ended: after `nanos`, with events or without.
    mutating func waited(nanos: Int, gotEvents: Bool) {
        dense = gotEvents && nanos <= windowNanos
    }

    /// Waits for events through `epollWait` (called with a timeout in milliseconds, it
    /// returns how many are ready, or -1): first polling with a timeout of 0 for up to the
    /// window when traffic is dense (yielding the core between polls to whatever else wants
    /// it), then sleeping up to `timeoutMs`. Returns what the last call returned.
    public mutating func wait(timeoutMs: Int32, _ epollWait: (Int32) -> Int32) -> Int32 {
        let start = monotonicNanos()
        var n: Int32 = 0
        if spins && timeoutMs > 0 {
            repeat {
                n = epollWait(0)
                if n == 0 { sched_yield() }
            } while n == 0 && monotonicNanos() - start < windowNanos
        }
        if n == 0 { n = epollWait(timeoutMs) }
        if n >= 0 { waited(nanos: monotonicNanos() - start, gotEvents: n > 0) }
        return n
    }
}
