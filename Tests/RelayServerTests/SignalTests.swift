// The daemon's signals reach its loop whatever mask it started with: a blocked signal is
// inherited from the thread that started the process, and a relay started from a Swift
// program's Dispatch thread once had SIGTERM blocked and never stopped.

import Foundation
import RelayCore
import RelayProtocol
import RelayServer
import RelayStore
import Synchronization
import XCTest

final class SignalTests: XCTestCase {
    func testSigtermReachesALoopWhoseThreadHadItBlocked() throws {
        let dir = URL(fileURLWithPath: "/tmp").appendingPathComponent("sig-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        // Routed to the loop by this test: set back afterwards, so that the test process
        // can be stopped as usual.
        defer { for s in [SIGTERM, SIGINT, SIGHUP] { signal(s, SIG_DFL) } }
        let store = try SQLiteStore(path: dir.appendingPathComponent("relay.db").path)
        var core = CoreConfig()
        core.relayUID = getuid()
        let server = try RelayServer(
            config: ServerConfig(socketPath: dir.appendingPathComponent("s").path), coreConfig: core, store: store,
            log: Log(level: .error) { _ in })
        let box = ServerBox(server)
        let ready = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        let loopThread = Mutex<pthread_t?>(nil)
        let thread = Thread {
            var blocked = sigset_t()
            sigemptyset(&blocked)
            sigaddset(&blocked, SIGTERM)
            pthread_sigmask(SIG_BLOCK, &blocked, nil)
            loopThread.withLock { $0 = pthread_self() }
            try? box.server.run { ready.signal() }
            finished.signal()
        }
        thread.start()
        XCTAssertEqual(ready.wait(timeout: .now() + 10), .success)
        guard let target = loopThread.withLock({ $0 }) else { return XCTFail("the loop's thread is unknown") }
        pthread_kill(target, SIGTERM)  // to the loop's thread itself, where it was blocked
        XCTAssertEqual(finished.wait(timeout: .now() + 10), .success, "the loop stopped on SIGTERM")
        if finished.wait(timeout: .now()) != .success { server.stopHandle.stop() }
    }
}

/// Hands the server to the thread that runs it, which alone uses it from then on.
private final class ServerBox: @unchecked Sendable {
    let server: RelayServer
    init(_ server: RelayServer) { self.server = server }
}
