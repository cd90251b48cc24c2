// The acks the load generator holds back, as the client library does: a connection's ack
// goes with the next frame written to it, or alone once the ack delay has passed since
// the first event it leaves unacknowledged.

struct HeldAcks {
    /// How long an ack waits for a frame to carry it, in nanoseconds.
    let delay: UInt64
    /// By descriptor: the highest seq read and not yet acknowledged (0: none).
    private var seq: [Int] = []
    /// By descriptor: when that ack is due on its own.
    private var due: [UInt64] = []
    /// Acks held, with their due times, in that order (the order they were held in, the
    /// delay being the same for all); those before `start` are done, and an entry whose
    /// ack has gone out with a frame since is passed over.
    private var queue: [(fd: Int32, due: UInt64)] = []
    private var start = 0

    init(delay: UInt64) { self.delay = delay }

    /// Makes room for descriptors up to `fd`.
    mutating func makeRoom(for fd: Int32) {
        let n = Int(fd) + 1 - seq.count
        guard n > 0 else { return }
        seq += repeatElement(0, count: n)
        due += repeatElement(0, count: n)
    }

    /// Notes that an event numbered `seq` was read on `fd` at `now` (read only when the
    /// connection had no ack held).
    mutating func read(_ seq: Int, on fd: Int32, at now: @autoclosure () -> UInt64) {
        let slot = Int(fd)
        guard seq > self.seq[slot] else { return }
        if self.seq[slot] == 0 {
            due[slot] = now() + delay
            queue.append((fd, due[slot]))
        }
        self.seq[slot] = seq
    }

    /// The ack to write on `fd` now, with a frame that carries it; nil if none is held.
    mutating func take(_ fd: Int32) -> Int? {
        let slot = Int(fd)
        guard seq[slot] > 0 else { return nil }
        defer { (seq[slot], due[slot]) = (0, 0) }
        return seq[slot]
    }

    /// Calls `send` with each connection whose ack is due at `now`, and its ack.
    mutating func takeDue(at now: UInt64, _ send: (Int32, Int) -> Void) {
        while start < queue.count, queue[start].due <= now {
            let (fd, when) = queue[start]
            start += 1
            guard due[Int(fd)] == when, let ack = take(fd) else { continue }  // gone with a frame since
            send(fd, ack)
        }
        if start == queue.count {
            queue.removeAll(keepingCapacity: true)
            start = 0
        }
    }

    /// How long a wait for frames may last at `now`: `longest` milliseconds, less when an
    /// ack falls due sooner.
    func waitMilliseconds(at now: UInt64, longest: Int32) -> Int32 {
        guard start < queue.count else { return longest }
        let next = queue[start].due
        return next <= now ? 0 : Int32(min(UInt64(longest), (next - now + 999_999) / 1_000_000))
    }
}
