@testable import RelayStore
import XCTest

final class CursorBoardTests: XCTestCase {
    func testPostsAreFiledInOrderAndAForgetDropsOnlyWhatCameBefore() {
        let board = CursorBoard()
        var posted = PostedCursors()
        board.post(member: "c1", session: "phone", cursor: 3)
        board.post(member: "c1", session: "phone", cursor: 5)
        board.post(member: "c1", session: "tablet", cursor: 2)
        board.post(member: "g1", session: "s", cursor: 1)
        posted.file(from: board)
        XCTAssertEqual(posted["c1", "phone"], 5)
        XCTAssertEqual(posted["c1", "tablet"], 2)
        XCTAssertEqual(posted["g1", "s"], 1)

        board.post(member: "c1", session: "phone", cursor: 7)
        board.forget(member: "c1")
        board.post(member: "c1", session: "laptop", cursor: 1)
        posted.file(from: board)
        XCTAssertNil(posted["c1", "phone"], "the sessions dropped went with their cursors")
        XCTAssertNil(posted["c1", "tablet"])
        XCTAssertEqual(posted["c1", "laptop"], 1, "the one posted after the drop stays")
        XCTAssertEqual(posted["g1", "s"], 1, "filing again keeps what was filed before, of other members too")

        posted.file(from: board)
        XCTAssertEqual(posted["c1", "laptop"], 1, "nothing is filed twice")
        XCTAssertNil(posted["c2", "laptop"])
    }
}
