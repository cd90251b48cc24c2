// A tiny epoll loop over non-blocking sockets with framed input and buffered output,
// shared by the load generator and the baseline forwarder so both sides of the
// comparison move bytes the same way. Frames are handed out in place and written in
// place, so the generator's own cost per cycle stays small beside the relay's.

import CSystem
import Glibc
import RelayProtocol
import RelayServer

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
    /// Each connection by its descriptor: descriptors are small numbers, so an array.
    private var links: [Link?] = []
    /// How many connections are open.
    private(set) var count = 0
    private var scratch = [UInt8](repeating: 0, count: 1 << 16)
    private var ready = [cs_ready](repeating: cs_ready(), count: 256)
    /// How waits for events go: the baseline forwarder polls briefly while traffic is
    /// dense, as the relay does; the load generator always sleeps.
    var spin = SpinPolicy(windowMicroseconds: 0)

    deinit {
        for case let l? in links { close(l.fd) }
        close(epfd)
    }

    func add(_ fd: Int32) {
        _ = cs_set_nonblocking(fd)
        if links.count <= Int(fd) { links += Array(repeating: nil, count: Int(fd) + 1 - links.count) }
        links[Int(fd)] = Link(fd: fd)
        count += 1
        cs_epoll_ctl(epfd, 0, fd, cs_epollin, UInt64(fd))
    }

    private func link(_ fd: Int32) -> Link? { Int(fd) < links.count ? links[Int(fd)] : nil }

    func queue(_ fd: Int32, _ bytes: [UInt8]) {
        link(fd)?.out.append(contentsOf: bytes)
    }

    /// Queues one frame, its body appended by `writeBody` straight into the output buffer.
    func queueFrame(_ fd: Int32, _ writeBody: (inout [UInt8]) -> Void) {
        link(fd)?.out.appendFrame(writeBody)
    }

    /// Writes what is queued; asks for EPOLLOUT only for leftovers.
    func flush(_ fd: Int32) {
        guard let l = link(fd), l.out.count > l.outStart else { return }
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

    /// Waits up to `timeoutMs`, then calls `onFrame` for every complete frame read, with
    /// the body in place (valid during the call only). Returns false when a connection failed.
    func poll(
        timeoutMs: Int32, onAccept: ((Int32) -> Void)? = nil, listener: Int32 = -1,
        onFrame: (Int32, UnsafeBufferPointer<UInt8>) -> Void
    ) -> Bool {
        let n = spin.wait(timeoutMs: timeoutMs) { cs_epoll_wait(epfd, &ready, Int32(ready.count), $0) }
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
            let events = ready[k].events
            if events & cs_epollout != 0 { flush(fd) }
            guard events & (cs_epollin | cs_epollhup | cs_epollerr) != 0, let l = link(fd) else { continue }
            let got = scratch.withUnsafeMutableBytes { buffer in
                let got = read(fd, buffer.baseAddress, buffer.count)
                if got > 0 { l.decoder.append(UnsafeRawBufferPointer(rebasing: buffer[0..<got])) }
                return got
            }
            if got <= 0 {
                if got == 0 || (errno != EAGAIN && errno != EINTR) { ok = false }
                continue
            }
            while true {
                let step = l.decoder.withNextFrame { onFrame(fd, $0) }
                guard case .frame = step else {
                    if case .violation = step { ok = false }
                    break
                }
            }
        }
        return ok
    }
}

/// The position of `needle` in `hay` (starting within its first `within` bytes), or nil.
func find(_ needle: StaticString, in hay: UnsafeBufferPointer<UInt8>, from start: Int = 0, within: Int = .max) -> Int? {
    needle.withUTF8Buffer { find($0, in: hay, from: start, within: within) }
}

func find(_ needle: [UInt8], in hay: [UInt8], from start: Int = 0) -> Int? {
    needle.withUnsafeBufferPointer { needle in hay.withUnsafeBufferPointer { find(needle, in: $0, from: start, within: .max) } }
}

private func find(_ needle: UnsafeBufferPointer<UInt8>, in hay: UnsafeBufferPointer<UInt8>, from start: Int, within: Int) -> Int? {
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
