// The load generator's acks, held as the client library holds them: each goes with the
// next frame written to its connection, or alone once its delay has passed.

import XCTest

@testable import permission_bench

final class HeldAcksTests: XCTestCase {
    private let ms: UInt64 = 1_000_000

    private func acks(upTo fd: Int32) -> HeldAcks {
        var a = HeldAcks(delay: 25 * ms)
        a.makeRoom(for: fd)
        return a
    }

    private func due(_ acks: inout HeldAcks, at t: UInt64) -> [Int32: Int] {
        var sent: [Int32: Int] = [:]
        acks.takeDue(at: t) { fd, seq in
            XCTAssertNil(sent[fd], "one ack per connection")
            sent[fd] = seq
        }
        return sent
    }

    func testAFrameWrittenCarriesTheHighestSeqReadAndNothingIsSentAgainLater() {
        var a = acks(upTo: 5)
        a.read(3, on: 5, at: 0)
        a.read(4, on: 5, at: 1 * ms)
        a.read(2, on: 5, at: 2 * ms)  // an older seq moves nothing
        XCTAssertEqual(a.take(5), 4)
        XCTAssertNil(a.take(5), "taken once")
        XCTAssertEqual(due(&a, at: 100 * ms), [:], "the ack that went with a frame does not go again")
    }

    func testAnAckWithNoFrameGoesAloneOnceItsDelayHasPassedSinceTheFirstEventItCovers() {
        var a = acks(upTo: 9)
        a.read(1, on: 7, at: 10 * ms)
        a.read(2, on: 7, at: 30 * ms)
        a.read(6, on: 9, at: 20 * ms)
        XCTAssertEqual(due(&a, at: 34 * ms), [:], "not before 25 ms")
        XCTAssertEqual(due(&a, at: 35 * ms), [7: 2], "25 ms after the first event, covering both")
        XCTAssertEqual(due(&a, at: 44 * ms), [:])
        XCTAssertEqual(due(&a, at: 45 * ms), [9: 6])
        XCTAssertEqual(due(&a, at: 1000 * ms), [:], "each goes once")
    }

    func testAnAckTakenByAFrameAndHeldAgainIsDueFromItsNewFirstEvent() {
        var a = acks(upTo: 3)
        a.read(1, on: 3, at: 0)
        XCTAssertEqual(a.take(3), 1)
        a.read(2, on: 3, at: 20 * ms)
        XCTAssertEqual(due(&a, at: 25 * ms), [:], "the first hold's time is not this one's")
        XCTAssertEqual(due(&a, at: 45 * ms), [3: 2])
    }

    func testTheWaitForFramesEndsWhenTheNextAckFallsDue() {
        var a = acks(upTo: 4)
        XCTAssertEqual(a.waitMilliseconds(at: 0, longest: 100), 100, "nothing held: the longest wait")
        a.read(1, on: 4, at: 10 * ms)
        XCTAssertEqual(a.waitMilliseconds(at: 10 * ms, longest: 100), 25)
        XCTAssertEqual(a.waitMilliseconds(at: 34 * ms + 1, longest: 100), 1, "rounded up, never early")
        XCTAssertEqual(a.waitMilliseconds(at: 35 * ms, longest: 100), 0)
        XCTAssertEqual(a.waitMilliseconds(at: 10 * ms, longest: 5), 5)
    }
}
