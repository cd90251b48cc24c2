// What a stream of the app's reports to the center: each event it was given is either
// returned (the stream ended before its loop took it) or settled (the loop is done with
// it), never both.

import Synchronization
import XCTest

@testable import PermissionKit

final class DeliveryStreamTests: XCTestCase {
    private final class Reports: Sendable {
        let settled = Mutex<[Int64]>([])
        let returned = Mutex<[Int64]>([])
    }

    private func stream(_ reports: Reports) -> DeliveryStream<String> {
        DeliveryStream<String>(
            settled: { seq in reports.settled.withLock { $0.append(seq) } },
            returned: { seq in reports.returned.withLock { $0.append(seq) } }, ended: {})
    }

    func testAnEventTakenAndHandledIsSettledOnce() {
        let reports = Reports()
        let s = stream(reports)
        XCTAssertTrue(s.give(1, "one"))
        let app = s.sequence
        app.taken(1, 7)
        app.processed(1)
        app.processed(1)  // the loop's iterator going, after its next
        s.finish()
        XCTAssertEqual(reports.settled.withLock { $0 }, [1])
        XCTAssertEqual(reports.returned.withLock { $0 }, [])
    }

    /// The stream ends between the loop's read of an event and its taking it: the event is
    /// returned, and the loop's handling it settles nothing more.
    func testAnEventReturnedAtTheEndIsNotSettledByTheLoopThatReadItToo() {
        let reports = Reports()
        let s = stream(reports)
        XCTAssertTrue(s.give(1, "one"))
        s.finish()
        let app = s.sequence
        app.taken(1, 7)
        app.processed(1)
        s.settle(takenBy: 7)
        XCTAssertEqual(reports.returned.withLock { $0 }, [1])
        XCTAssertEqual(reports.settled.withLock { $0 }, [], "counted once, as returned")
    }

    /// Closing settles what the closing task's loops took, and nothing of another task's.
    func testClosingSettlesOnlyWhatTheClosingTaskTook() {
        let reports = Reports()
        let s = stream(reports)
        XCTAssertTrue(s.give(1, "one"))
        XCTAssertTrue(s.give(2, "two"))
        let app = s.sequence
        app.taken(1, 7)
        app.taken(2, 8)
        s.settle(takenBy: 7)
        XCTAssertEqual(reports.settled.withLock { $0 }, [1])
        app.processed(1)  // its loop comes back later: already settled
        XCTAssertEqual(reports.settled.withLock { $0 }, [1])
        app.processed(2)
        XCTAssertEqual(reports.settled.withLock { $0 }, [1, 2])
    }
}
