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

    func testAWindowOfZeroNeverPolls() {
        var p = SpinPolicy(windowMicroseconds: 0)
        p.waited(nanos: 0, gotEvents: true)
        XCTAssertFalse(p.spins)
        XCTAssertEqual(SpinPolicy(windowMicroseconds: -5).windowNanos, 0)
    }
}
