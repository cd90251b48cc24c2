// Keys that arrive in one read of the terminal each count, arrow keys whole, also when a
// read ends inside one.

import XCTest

@testable import permission_guardian

final class TerminalKeysTests: XCTestCase {
    private let down: [UInt8] = [27, 91, 66]
    private let up: [UInt8] = [27, 91, 65]
    private let ctrlDown: [UInt8] = [27, 91, 49, 59, 53, 66]  // ESC [ 1 ; 5 B

    private func keys(_ bytes: [UInt8]) -> [[UInt8]] {
        let split = terminalKeys(bytes)
        XCTAssertEqual(split.rest, [], "nothing cut off")
        return split.keys
    }

    func testKeysTypedTogetherAreEachAKey() {
        XCTAssertEqual(keys(Array("jjq".utf8)), [[106], [106], [113]])
        XCTAssertEqual(keys(down + down + Array("a".utf8)), [down, down, [97]])
        XCTAssertEqual(keys(up + Array("k".utf8) + up), [up, [107], up])
    }

    func testAnArrowKeyInApplicationModeOrWithModifiersIsOneKey() {
        XCTAssertEqual(keys([27, 79, 66, 97]), [[27, 79, 66], [97]])
        XCTAssertEqual(keys(ctrlDown + [113]), [ctrlDown, [113]])
    }

    /// Alt+a is not `a`: the view ignores it rather than approving.
    func testAKeyWithAltIsOneKey() {
        XCTAssertEqual(keys([27, 97, 106]), [[27, 97], [106]])
    }

    /// A held Ctrl-Down cut by the end of a read, anywhere: its `1` and `5` are not keys
    /// (they would pick choices); what is cut off is read with the next read's bytes.
    func testASequenceCutOffByTheEndOfAReadIsReadWithTheNext() {
        for cut in 1..<ctrlDown.count {
            let first = terminalKeys(ctrlDown + ctrlDown[..<cut])
            XCTAssertEqual(first.keys, [ctrlDown], "cut after \(cut)")
            XCTAssertEqual(first.rest, Array(ctrlDown[..<cut]), "cut after \(cut)")
            let second = terminalKeys(ctrlDown[cut...] + [97], carried: first.rest)
            XCTAssertEqual(second.keys, [ctrlDown, [97]], "cut after \(cut)")
            XCTAssertEqual(second.rest, [])
        }
    }

    /// An Escape at the end of a read is the Escape key once the next read does not go on
    /// with a sequence: the key after it still counts.
    func testAnEscapeAloneIsTheEscapeKey() {
        let escape = terminalKeys([97, 27])
        XCTAssertEqual(escape.keys, [[97]])
        XCTAssertEqual(escape.rest, [27])
        XCTAssertEqual(terminalKeys([106], carried: escape.rest).keys, [[27], [106]])
        XCTAssertEqual(keys([3]), [[3]])
        XCTAssertEqual(keys([]), [])
    }
}
