@testable import RelayCore
import RelayProtocol
import XCTest

final class FrameBufferTests: XCTestCase {
    private func address(_ frame: [UInt8]) -> UnsafeRawPointer? { frame.withUnsafeBytes { $0.baseAddress } }

    /// The frames of one request's outputs, each passed to `body` as the reactor gets it.
    private func request(_ h: CoreHarness, _ conn: ConnectionID, family: String, _ body: ([UInt8]) -> Void) {
        h.core.receive(
            conn, body: (["type": "createFamily", "id": .string(family), "family": .string(family)] as JSONObject).encoded, now: h.now)
        h.core.drainOutputs { o in
            guard case .send(_, let frame) = o else { return XCTFail("\(o)") }
            body(frame)
        }
    }

    func testAFrameTheReactorDropsLendsItsBufferToTheNextAndAKeptOneStaysAsItWas() throws {
        let h = try CoreHarness()
        let admin = h.admin()
        var dropped: UnsafeRawPointer?
        request(h, admin, family: "fa") { dropped = address($0) }
        XCTAssertNotNil(dropped)

        var kept: [[UInt8]] = []
        request(h, admin, family: "fb") { frame in
            XCTAssertEqual(address(frame), dropped, "built in the buffer of the frame dropped before")
            kept.append(frame)
        }
        request(h, admin, family: "fc") { frame in
            XCTAssertNotEqual(address(frame), address(kept[0]), "a frame still kept lends nothing")
            XCTAssertEqual(try? JSON.parse(frame.dropFirst(4))["re"]?.string, "fc")
        }
        XCTAssertEqual(try JSON.parse(kept[0].dropFirst(4))["re"]?.string, "fb")
    }
}
