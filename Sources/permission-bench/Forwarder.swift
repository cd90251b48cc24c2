// The baseline: a minimal forwarder on the same socket machinery. It links each child
// with its family's guardians by the first frame's `member` (cN ↔ gN, gN-K) and then
// moves every frame unparsed and unstored — a child's to all its guardians, a
// guardian's to the child: the machine's limit for the hops of a cycle. It waits for
// events as the relay does by default (polling briefly while traffic is dense).
// Replying, it also answers every frame it moves with a short `ok` to its sender, as the
// relay answers each ask and answer: the limit for the four deliveries of a cycle that
// the contract's replies make (the relay's `questionClosed` rides with the answer's `ok`).

import CLISupport
import CSystem
import Glibc
import RelayProtocol
import RelayServer

enum Forwarder {
    static func run(socket: String, replying: Bool) -> Int32 {
        // Stopped by a signal's default action: it has nothing to clean up, and the benchmark's
        // own handlers (which ignore the signal for a Dispatch source) must not catch it here.
        for sig in [SIGINT, SIGTERM] { signal(sig, SIG_DFL) }
        cs_unblock_stop_signals(nil)  // a blocked signal never takes its default action
        unlink(socket)
        let listener = cs_listen_unix(socket, 4096)
        guard listener >= 0 else {
            printErr("permission-bench: cannot listen on \(socket)")
            return 1
        }
        let loop = EventLoop()
        loop.spin = SpinPolicy(windowMicroseconds: SpinPolicy.defaultMicroseconds)  // the relay's way of waiting
        cs_epoll_ctl(loop.epfd, 0, listener, cs_epollin, UInt64(listener))
        /// Where each member's frames go, once it has said hello.
        var route: [Int32: [Int32]] = [:]
        var childOf: [Substring: Int32] = [:]
        var guardiansOf: [Substring: [Int32]] = [:]
        let ok = (["type": "ok", "re": "r"] as JSONObject).frame
        printOut("forwarding on \(socket)")
        while true {
            var touched: [Int32] = []
            _ = loop.poll(timeoutMs: 1000, listener: listener) { fd, body in
                if let targets = route[fd] {
                    if replying {
                        loop.queue(fd, ok)
                        touched.append(fd)
                    }
                    for t in targets {
                        loop.queueFrame(t) { $0.append(contentsOf: body) }
                        touched.append(t)
                    }
                    return
                }
                guard let member = (try? JSON.parse(Array(body)))?["member"]?.string else { return }
                let family = member.dropFirst().prefix { $0 != "-" }
                if member.first == "c" {
                    childOf[family] = fd
                    route[fd] = guardiansOf[family] ?? []
                    for g in guardiansOf[family] ?? [] { route[g] = [fd] }
                } else {
                    guardiansOf[family, default: []].append(fd)
                    route[fd] = childOf[family].map { [$0] } ?? []
                    if let c = childOf[family] { route[c, default: []].append(fd) }
                }
                loop.queue(fd, (["type": "welcome"] as JSONObject).frame)
                touched.append(fd)
            }
            for fd in touched { loop.flush(fd) }
        }
    }
}
