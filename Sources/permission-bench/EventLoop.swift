// A tiny epoll loop over non-blocking sockets with framed input and buffered output,
// shared by the load generator and the baseline forwarder so both sides of the
// comparison move bytes the same way.

import CSystem
import Glibc
import RelayProtocol

/// One non-blocking connection: frames in, bytes out. A class, so its buffers change in
/// place (a struct copied out of `links` would copy or reallocate them on every change).
final class Link {
    let fd: Int32
    var decoder = FrameDecoder(maxFrameBytes: 16 << 20)
    var out: [UInt8] = []
    var outStart = 0
    var wantsWrite = false

    init(fd: Int32) { self.fd = fd }
}

final class EventLoop {
    let epfd = cs_epoll_create()
    var links: [Int32: Link] = [:]
    private var scratch = [UInt8](repeating: 0, count: 1 << 16)

    deinit {
        for fd in links.keys { close(fd) }
        close(epfd)
    }

    func add(_ fd: Int32) {
        _ = cs_set_nonblocking(fd)
        links[fd] = Link(fd: fd)
        cs_epoll_ctl(epfd, 0, fd, cs_epollin, UInt64(fd))
    }

    func queue(_ fd: Int32, _ bytes: [UInt8]) {
        links[fd]?.out.append(contentsOf: bytes)
    }

    /// Writes what is queued; asks for EPOLLOUT only for leftovers.
    func flush(_ fd: Int32) {
        guard let l = links[fd], l.out.count > l.outStart else { return }
        while l.outStart < l.out.count {
            let n = l.out.withUnsafeBytes { cs_send(fd, $0.baseAddress! + l.outStart, l.out.count - l.outStart) }
            if n <= 0 { break }
            l.outStart += n
        }
        if l.outStart == l.out.count {
            l.out.removeAll(keepingCapacity: true)
            l.outStart = 0
        }
        let want = l.outStart < l.out.count
        if want != l.wantsWrite {
            cs_epoll_ctl(epfd, 1, fd, cs_epollin | (want ? cs_epollout : 0), UInt64(fd))
            l.wantsWrite = want
        }
    }

    /// Waits up to `timeoutMs`, then calls `onFrame` for every complete frame read.
    /// Returns false when a connection failed.
    func poll(timeoutMs: Int32, onAccept: ((Int32) -> Void)? = nil, listener: Int32 = -1, onFrame: (Int32, [UInt8]) -> Void) -> Bool {
        var ready = [cs_ready](repeating: cs_ready(), count: 256)
        let n = cs_epoll_wait(epfd, &ready, 256, timeoutMs)
        var ok = true
        for k in 0..<Int(max(n, 0)) {
            let fd = Int32(truncatingIfNeeded: ready[k].token)
            if fd == listener {
                while true {
                    let c = cs_accept(listener)
                    if c < 0 { break }
                    add(c)
                    onAccept?(c)
                }
                continue
            }
            if ready[k].events & cs_epollout != 0 { flush(fd) }
            guard ready[k].events & (cs_epollin | cs_epollhup | cs_epollerr) != 0, let l = links[fd] else { continue }
            let got = scratch.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if got <= 0 {
                if got == 0 || (errno != EAGAIN && errno != EINTR) { ok = false }
                continue
            }
            l.decoder.append(scratch[0..<got])
            while let e = l.decoder.next() {
                guard case .frame(let body) = e else { ok = false; break }
                onFrame(fd, body)
            }
        }
        return ok
    }
}

/// The position of `needle` in `hay` (starting within its first `within` bytes), or nil.
func find(_ needle: [UInt8], in hay: [UInt8], from start: Int = 0, within: Int = .max) -> Int? {
    guard hay.count >= needle.count, let first = needle.first else { return nil }
    var i = start
    let last = min(hay.count - needle.count, within - 1)
    while i <= last {
        if hay[i] == first {
            var k = 1
            while k < needle.count && hay[i + k] == needle[k] { k += 1 }
            if k == needle.count { return i }
        }
        i += 1
    }
    return nil
}
