// The monotonic clock, which the loop paces its timers by.

import Glibc

/// Nanoseconds on the monotonic clock.
public func monotonicNanos() -> Int {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}
