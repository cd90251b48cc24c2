@testable import RelayCore
import RelayProtocol
import XCTest

/// How the core holds known handles: one entry per handle a child keeps, for good, so
/// their lists of actions are shared rather than held by each.
final class KnownHandleTests: XCTestCase {
    func testHandlesApprovedWithTheSameActionsShareOneList() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let names: [JSON] = ["message", "audioCall", "videoCall", "call", "chat", "follow", "beFollowed", "friend", "connect"]
        var lists: [[JSON]] = []
        for a in names { for b in names where b != a { lists.append([a, b]) } }  // 72 lists, each its own
        for (i, actions) in (lists + [lists[0]]).enumerated() {
            let handle = "+1 555 \(1000 + i)"
            var q = h.question(handles: [handle])
            q["topic"] = .object(["kind": "communication", "personInformation": [CoreHarness.person(handle)], "actions": .array(actions)])
            h.ok(c, ["type": "ask", "question": .object(q)])
            h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": "approve"])
        }
        let known = try XCTUnwrap(h.core.members["c1"]?.known)
        XCTAssertEqual(known.count, lists.count + 1)
        XCTAssertEqual(h.core.sharedActions.count, RelayCore.sharedActionsLimit, "no more lists are held than the limit")
        func entry(_ i: Int) throws -> KnownHandle {
            try XCTUnwrap(NormalizedHandle(kind: .phoneNumber, rawValue: "+1 555 \(1000 + i)").flatMap { known[$0] })
        }
        let (first, again) = (try entry(0), try entry(lists.count))
        XCTAssertEqual(first.actions, ["message", "audioCall"])
        let buffer = { (e: KnownHandle) in e.actions.withUnsafeBufferPointer { $0.baseAddress } }
        XCTAssertEqual(buffer(first), buffer(again), "one list for both")
    }
}
