// Keys that arrive in one read of the terminal each count, arrow keys whole.

import XCTest

@testable import permission_guardian

final class TerminalKeysTests: XCTestCase {
    private let down: [UInt8] = [27, 91, 66]
    private let up: [UInt8] = [27, 91, 65]

    func testKeysTypedTogetherAreEachAKey() {
        XCTAssertEqual(terminalKeys(Array("jjq".utf8)), [[106], [106], [113]])
        XCTAssertEqual(terminalKeys(down + down + Array("a".utf8)), [down, down, [97]])
        XCTAssertEqual(terminalKeys(up + Array("k".utf8) + up), [up, [107], up])
    }

    func testAnArrowKeyInApplicationModeOrWithModifiersIsOneKey() {
        XCTAssertEqual(terminalKeys([27, 79, 66, 97]), [[27, 79, 66], [97]])
        // Ctrl-Down: ESC [ 1 ; 5 B.
        XCTAssertEqual(terminalKeys([27, 91, 49, 59, 53, 66, 113]), [[27, 91, 49, 59, 53, 66], [113]])
    }

    /// Alt+a is not `a`: the view ignores it rather than approving.
    func testAKeyWithAltIsOneKey() {
        XCTAssertEqual(terminalKeys([27, 97, 106]), [[27, 97], [106]])
    }

    func testAnEscapeAloneOrCutOffStaysWhatItIs() {
        XCTAssertEqual(terminalKeys([27]), [[27]])
        XCTAssertEqual(terminalKeys([27, 91]), [[27, 91]])
        XCTAssertEqual(terminalKeys([97, 27]), [[97], [27]])
        XCTAssertEqual(terminalKeys([3]), [[3]])
        XCTAssertEqual(terminalKeys([]), [])
    }
}
