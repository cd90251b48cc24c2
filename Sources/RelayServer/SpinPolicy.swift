// When the event loop waits for events by polling instead of sleeping. Waking a sleeping
// thread takes the scheduler's time and costs the caches the thread had: at light,
// back-and-forth traffic, a good part of a request's latency. So right after a wait that
// ended within the window — traffic dense enough that the next event is likely as close —
// the loop polls for up to the window before it sleeps; after a longer wait it sleeps at
// once, so a quiet relay costs nothing.

import Glibc

/// Decides, from how the last wait ended, whether the next one polls first.
struct SpinPolicy {
    /// How long a wait polls before sleeping; 0 never polls.
    let windowNanos: Int
    private var dense = false

    init(windowMicroseconds: Int) { windowNanos = max(0, windowMicroseconds) * 1000 }

    /// Whether the next wait should poll for up to `windowNanos` before sleeping.
    var spins: Bool { windowNanos > 0 && dense }

    /// Notes how a wait ended: after `nanos`, with events or without.
    mutating func waited(nanos: Int, gotEvents: Bool) {
        dense = gotEvents && nanos <= windowNanos
    }
}

/// Nanoseconds on the monotonic clock.
func monotonicNanos() -> Int {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}
