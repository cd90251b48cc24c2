@testable import RelayCore
import RelayProtocol
import XCTest

final class HeapTests: XCTestCase {
    func testACompactedHeapKeepsItsOrder() {
        var heap = Heap<Int>(by: <)
        var rng = SystemRandomNumberGenerator()
        let values = (0..<500).map { _ in Int.random(in: 0..<10_000, using: &rng) }
        for v in values { heap.push(v) }
        heap.compact { $0 % 3 == 0 }
        var popped: [Int] = []
        while let v = heap.pop() { popped.append(v) }
        XCTAssertEqual(popped, values.filter { $0 % 3 == 0 }.sorted())
    }

    func testDeadlinesOfQuestionsCancelledLongBeforeTheyExpireDoNotPileUp() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let soon = h.question(expiresIn: 60)
        h.ok(c, ["type": "ask", "question": .object(soon)])
        for _ in 0..<1500 {
            let q = h.question(expiresIn: 10 * 365 * 86400)
            h.ok(c, ["type": "ask", "question": .object(q)])
            h.ok(c, ["type": "cancel", "questionId": q["id"]!])
        }
        XCTAssertLessThan(h.core.questionDeadlines.count, 2 * 1 + 1024 + 1, "the cancelled questions' deadlines are let go")
        h.advance(seconds: 61)
        let expired = h.ok(c, ["type": "questions", "status": "expired"])["questions"]?.array
        XCTAssertEqual(expired?.map { $0["id"] }, [soon["id"]], "the pending one still expires")
    }

    func testTimedApprovalsRenewedOverAndOverLeaveOneDeadlineThatStillRunsOut() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let choices: JSON = [
            .object(["id": "day", "title": "A day", "answer": "approval", "durationSeconds": 86400]),
            .object(["id": "no", "title": "No", "answer": "denial"]),
        ]
        for _ in 0..<1100 {  // each renewal ends a second later than the one before
            let q = h.question(expiresIn: nil, choices: choices)
            h.ok(c, ["type": "ask", "question": .object(q)])
            h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": "day"])
            h.advance(seconds: 1)
        }
        XCTAssertLessThan(h.core.knownDeadlines.count, 1024, "the renewed approvals' deadlines are let go")
        let handle: JSON = .object(["value": "+15550100", "kind": "phoneNumber"])
        func known() -> Int? { h.ok(c, ["type": "knownHandles", "handles": [handle]])["known"]?.array?.count }
        h.advance(seconds: 86400 - 2)
        XCTAssertEqual(known(), 1, "the last renewal holds")
        h.advance(seconds: 2)
        XCTAssertEqual(known(), 0, "and runs out")
    }
}
