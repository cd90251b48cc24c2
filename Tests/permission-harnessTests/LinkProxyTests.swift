// The harness's link proxy: closed, it leaves nothing open; and a link cut while data
// flows through it never ends the harness with SIGPIPE.

import Foundation
import Glibc
import XCTest

@testable import permission_harness

final class LinkProxyTests: XCTestCase {
    private func openDescriptors() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1 }

    func testAClosedProxyLeavesNothingOpen() throws {
        let before = openDescriptors()
        for _ in 0..<10 { try LinkProxy(to: 1).close() }
        XCTAssertEqual(openDescriptors(), before, "listening sockets left open")
    }

    func testALinkCutWhileDataFlowsDoesNotEndTheHarness() throws {
        let previous = signal(SIGPIPE, SIG_DFL)  // as the harness has it
        defer { signal(SIGPIPE, previous) }
        // A "hub" that takes connections and reads what comes.
        let hub = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(hub, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(hub, $0, &length) }
        }
        listen(hub, 4)
        defer { close(hub) }
        let proxy = try LinkProxy(to: Int(UInt16(bigEndian: address.sin_port)))
        defer { proxy.close() }
        for _ in 0..<30 {
            proxy.setCut(false)
            let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var through = address
            through.sin_port = UInt16(proxy.port).bigEndian
            let connected = withUnsafePointer(to: &through) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            XCTAssertEqual(connected, 0)
            let accepted = accept(hub, nil, nil)
            let writer = Thread {
                let chunk = [UInt8](repeating: 0x41, count: 512)
                while send(client, chunk, chunk.count, Int32(MSG_NOSIGNAL)) > 0 {}
            }
            writer.start()
            let reader = Thread {
                var sink = [UInt8](repeating: 0, count: 4096)
                while recv(accepted, &sink, sink.count, 0) > 0 {}
            }
            reader.start()
            usleep(10_000)
            proxy.setCut(true)  // cut-link while data flows
            usleep(10_000)
            shutdown(client, Int32(SHUT_RDWR))
            shutdown(accepted, Int32(SHUT_RDWR))
            usleep(5_000)
            close(client)
            close(accepted)
        }
    }
}
