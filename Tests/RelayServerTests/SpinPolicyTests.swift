// When the event loop polls before it sleeps: only right after a wait that ended within
// the window with events, never when the window is 0.

import XCTest

@testable import RelayServer

final class SpinPolicyTests: XCTestCase {
    func testPollsOnlyAfterAShortWaitThatBroughtEvents() {
        var p = SpinPolicy(windowMicroseconds: 50)
        XCTAssertEqual(p.windowNanos, 50_000)
        XCTAssertFalse(p.spins, "a relay that has seen nothing yet sleeps")
        p.waited(nanos: 20_000, gotEvents: true)
        XCTAssertTrue(p.spins)
        p.waited(nanos: 50_000, gotEvents: true)
        XCTAssertTrue(p.spins, "a wait of exactly the window still counts as dense")
        p.waited(nanos: 50_001, gotEvents: true)
        XCTAssertFalse(p.spins, "after a longer wait the next one sleeps at once")
        p.waited(nanos: 1_000, gotEvents: true)
        XCTAssertTrue(p.spins)
        p.waited(nanos: 1_000, gotEvents: false)
        XCTAssertFalse(p.spins, "a wait that ended without events (a timeout) is not traffic")
    }

    func testWaitPollsFirstOnlyWhileTrafficIsDense() {
        var p = SpinPolicy(windowMicroseconds: 1_000_000)  // wide, so that a slow machine still polls three times
        var calls: [Int32] = []
        // Not dense yet: straight to sleep, with the timeout given.
        XCTAssertEqual(
            p.wait(timeoutMs: 500) {
                calls.append($0); return 1
            }, 1)
        XCTAssertEqual(calls, [500])
        // That wait was short and brought an event: the next polls (timeout 0) until one comes.
        calls = []
        var polls = 0
        XCTAssertEqual(
            p.wait(timeoutMs: 500) {
                calls.append($0)
                polls += 1
                return polls == 3 ? 2 : 0
            }, 2)
        XCTAssertEqual(calls, [0, 0, 0])
        // A wait with no timeout to spare (0) never polls first; a timeout ends the density.
        calls = []
        XCTAssertEqual(
            p.wait(timeoutMs: 0) {
                calls.append($0); return 0
            }, 0)
        XCTAssertEqual(calls, [0])
        XCTAssertFalse(p.spins)
    }

    func testAWindowOfZeroNeverPolls() {
        var p = SpinPolicy(windowMicroseconds: 0)
        p.waited(nanos: 0, gotEvents: true)
        XCTAssertFalse(p.spins)
        XCTAssertEqual(SpinPolicy(windowMicroseconds: -5).windowNanos, 0)
    }
}
