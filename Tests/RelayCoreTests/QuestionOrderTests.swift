@testable import RelayCore
import XCTest

final class QuestionOrderTests: XCTestCase {
    func testForgetsTheOldestAllowedAndKeepsTheOrderThroughCompactions() {
        var order = QuestionOrder()
        let pinned: Set<String> = ["q0", "q7"]  // e.g. still pending
        var forgotten: [String] = []
        for n in 0..<1000 {
            order.append("q\(n)")
            forgotten += order.forgetOldest(keeping: 10) { !pinned.contains($0) }
        }
        XCTAssertEqual(order.count, 10)
        XCTAssertEqual(Array(order), ["q0", "q7"] + (992..<1000).map { "q\($0)" })
        XCTAssertEqual(forgotten.count, 990)
        XCTAssertEqual(forgotten.prefix(3), ["q1", "q2", "q3"], "oldest first")
        XCTAssertFalse(forgotten.contains("q0") || forgotten.contains("q7"))
        XCTAssertEqual(order.forgetOldest(keeping: 10) { _ in true }, [], "nothing to forget at the limit")
    }

    func testKeepsMoreThanTheLimitWhenNothingMayBeForgotten() {
        var order = QuestionOrder()
        for n in 0..<5 { order.append("q\(n)") }
        XCTAssertEqual(order.forgetOldest(keeping: 2) { _ in false }, [])
        XCTAssertEqual(Array(order), ["q0", "q1", "q2", "q3", "q4"])
    }
}
