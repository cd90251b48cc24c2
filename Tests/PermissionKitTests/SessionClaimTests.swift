// Copies of an app running at once each hold a default session of their own, by a lock
// beside its state file; one let go is taken by the next copy to start.

import Foundation
import XCTest

@testable import PermissionKit

final class SessionClaimTests: XCTestCase {
    func testEachCopyTakesTheFirstSessionNoOtherHolds() throws {
        let dir = NSTemporaryDirectory() + "claims-\(UUID().uuidString)"
        addTeardownBlock { try? FileManager.default.removeItem(atPath: dir) }
        let base = String(repeating: "s", count: 64)  // a long name keeps its copy's number
        let config = RelayConfiguration(
            socketPath: "/nowhere", member: "kid", token: "t", session: base, stateFile: dir + "/kid.\(base).state")
        let (first, firstClaim) = SessionClaim.take(config)
        let (second, secondClaim) = SessionClaim.take(config)
        XCTAssertEqual(first.session, base)
        XCTAssertEqual(first.stateFile, config.stateFile)
        XCTAssertEqual(second.session, String(base.prefix(62)) + "-2")
        XCTAssertEqual(second.stateFile, dir + "/kid.\(second.session!).state")
        XCTAssertNotNil(secondClaim)
        firstClaim?.release()
        let (third, thirdClaim) = SessionClaim.take(config)
        XCTAssertEqual(third.session, base, "the first session, let go, is taken again")
        withExtendedLifetime((secondClaim, thirdClaim)) {}
    }

    /// Where no lock can be had, the copy keeps the session it was given.
    func testWithoutAPlaceForTheLockTheSessionIsKept() {
        let config = RelayConfiguration(
            socketPath: "/nowhere", member: "kid", token: "t", session: "app", stateFile: "/proc/no-such-dir/kid.app.state")
        let (kept, claim) = SessionClaim.take(config)
        XCTAssertEqual(kept.session, "app")
        XCTAssertNil(claim)
    }

    /// Only the default session is shared out among copies: one the app names after reading
    /// the environment, or a state file it chooses, is used as it is.
    func testASessionTheAppNamesIsItsOwn() throws {
        let env = ["PERMISSION_MEMBER": "kid", "PERMISSION_TOKEN": "t", "PERMISSION_STATE_DIR": "/tmp/state"]
        let fromEnvironment = try RelayConfiguration.result(env, app: "app").get()
        XCTAssertTrue(fromEnvironment.sessionPerCopy)
        var named = fromEnvironment
        named.session = "tablet"
        XCTAssertFalse(named.sessionPerCopy)
        var elsewhere = fromEnvironment
        elsewhere.stateFile = "/tmp/mine.state"
        XCTAssertFalse(elsewhere.sessionPerCopy)
        XCTAssertFalse(try RelayConfiguration.result(env.merging(["PERMISSION_SESSION": "s"]) { $1 }, app: "app").get().sessionPerCopy)
    }
}
