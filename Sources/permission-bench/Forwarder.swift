// The baseline: a minimal forwarder on the same socket machinery. It pairs each
// child with its family's guardian by the first frame's `member` (cN ↔ gN) and then
// moves every frame to the partner unparsed and unstored — the machine's limit for
// the four hops of a cycle.

import CLISupport
import CSystem
import Glibc
import RelayProtocol

enum Forwarder {
    static func run(socket: String) -> Int32 {
        unlink(socket)
        let listener = cs_listen_unix(socket, 4096)
        guard listener >= 0 else {
            printErr("permission-bench: cannot listen on \(socket)")
            return 1
        }
        let loop = EventLoop()
        cs_epoll_ctl(loop.epfd, 0, listener, cs_epollin, UInt64(listener))
        var partner: [Int32: Int32] = [:]
        var byMember: [String: Int32] = [:]
        printOut("forwarding on \(socket)")
        while true {
            var touched: [Int32] = []
            _ = loop.poll(timeoutMs: 1000, listener: listener) { fd, body in
                if let p = partner[fd] {
                    loop.queue(p, framed(body))
                    touched.append(p)
                    return
                }
                guard let member = (try? JSON.parse(body))?["member"]?.string else { return }
                byMember[member] = fd
                let other = (member.first == "c" ? "g" : "c") + member.dropFirst()
                if let o = byMember[other] {
                    partner[fd] = o
                    partner[o] = fd
                    for x in [fd, o] {
                        loop.queue(x, (["type": "welcome"] as JSONObject).frame)
                        touched.append(x)
                    }
                }
            }
            for fd in touched { loop.flush(fd) }
        }
    }
}
