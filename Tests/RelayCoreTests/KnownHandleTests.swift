@testable import RelayCore
import RelayProtocol
import XCTest

/// How the core holds known handles: a child may keep very many, so their lists of
/// actions are shared rather than held by each.
final class KnownHandleTests: XCTestCase {
    func testHandlesApprovedWithTheSameActionsShareOneList() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let names: [String] = ["message", "audioCall", "videoCall", "call", "chat", "follow", "beFollowed", "friend", "connect"]
        var lists: [[String]] = []
        for a in names { for b in names where b != a { lists.append([a, b]) } }  // 72 lists, more than are shared
        lists.append(lists[0])
        for (i, actions) in lists.enumerated() {
            let q = h.question(handles: ["+1 555 \(1000 + i)"], actions: actions)
            h.ok(c, ["type": "ask", "question": .object(q)])
            h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": "approve"])
        }
        func check(_ when: String) throws {
            let known = try XCTUnwrap(h.core.members["c1"]?.known)
            func entry(_ i: Int) throws -> KnownHandle {
                try XCTUnwrap(NormalizedHandle(kind: .phoneNumber, rawValue: "+1 555 \(1000 + i)").flatMap { known[$0] })
            }
            for (i, actions) in lists.enumerated() { XCTAssertEqual(try entry(i).actions, actions, "\(when): handle \(i)") }
            XCTAssertEqual(h.core.sharedActions.count, RelayCore.sharedActionsLimit, "\(when): no more lists held than the limit")
            let (first, again) = (try entry(0), try entry(lists.count - 1))
            let oneList = first.actions.withUnsafeBufferPointer { a in
                again.actions.withUnsafeBufferPointer { $0.baseAddress == a.baseAddress }
            }
            XCTAssertTrue(oneList, "\(when): one list for both handles")
        }
        try check("as approved")
        try h.restart()
        try check("as loaded")
    }
}
