// How a thread beside the loop wakes it: a pipe whose read end is in the loop's epoll set.

import CSystem
import Glibc

final class WakePipe: Sendable {
    /// The loop's end: readable once `wake` was called.
    let readFD: Int32
    private let writeFD: Int32

    init() throws {
        var fds: [Int32] = [-1, -1]
        guard cs_pipe(&fds) == 0 else { throw ServerError("cannot create a pipe: \(String(cString: strerror(errno)))") }
        (readFD, writeFD) = (fds[0], fds[1])
    }

    deinit {
        Glibc.close(readFD)
        Glibc.close(writeFD)
    }

    func wake() {
        var b: UInt8 = 1
        _ = Glibc.write(writeFD, &b, 1)
    }

    /// Empties the pipe (the loop, before it takes what woke it).
    func drain() {
        var b = [UInt8](repeating: 0, count: 64)
        while Glibc.read(readFD, &b, b.count) > 0 {}
    }
}
