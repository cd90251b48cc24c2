@testable import RelayCore
import RelayProtocol
import XCTest

/// Question n's id.
private func q(_ n: Int) -> QuestionID { QuestionID(String(format: "00000000-0000-4000-8000-%012d", n))! }

final class QuestionOrderTests: XCTestCase {
    func testForgetsTheOldestAllowedAndKeepsTheOrderThroughCompactions() {
        var order = QuestionOrder()
        let pinned: Set<QuestionID> = [q(0), q(7)]  // e.g. still pending
        var forgotten: [QuestionID] = []
        for n in 0..<1000 {
            order.append(q(n))
            forgotten += order.forgetOldest(while: { $0 > 10 }) { !pinned.contains($0) }
        }
        XCTAssertEqual(order.count, 10)
        XCTAssertEqual(Array(order), [q(0), q(7)] + (992..<1000).map(q))
        XCTAssertEqual(forgotten.count, 990)
        XCTAssertEqual(forgotten.prefix(3), [q(1), q(2), q(3)], "oldest first")
        XCTAssertFalse(forgotten.contains(q(0)) || forgotten.contains(q(7)))
        XCTAssertEqual(order.forgetOldest(while: { $0 > 10 }) { _ in true }, [], "nothing to forget at the limit")
    }

    func testKeepsMoreThanTheLimitWhenNothingMayBeForgotten() {
        var order = QuestionOrder()
        for n in 0..<5 { order.append(q(n)) }
        XCTAssertEqual(order.forgetOldest(while: { $0 > 2 }) { _ in false }, [])
        XCTAssertEqual(Array(order), (0..<5).map(q))
    }
}
