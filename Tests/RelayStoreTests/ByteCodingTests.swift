@testable import RelayStore
import XCTest

final class ByteCodingTests: XCTestCase {
    /// The journal's form, byte for byte: zigzag varints, and bytes after their length (a
    /// varint too).
    func testIntegersAreZigzagVarintsAndBytesFollowTheirLength() {
        var w = ByteWriter(capacity: 1)
        for v: Int64 in [0, -1, 1, 63, -64, 64, 300] { w.int(v) }
        w.bool(true)
        w.string("hé")
        w.data([7, 8])
        XCTAssertEqual(w.bytes, [0, 1, 2, 0x7E, 0x7F, 0x80, 0x01, 0xD8, 0x04, 1, 6, 0x68, 0xC3, 0xA9, 4, 7, 8])
    }

    /// Growing many times over and cut back (letting its memory go), a writer keeps what
    /// it holds and goes on after it; a reader gets every value back.
    func testAGrownAndCutWriterKeepsItsBytesAndIsReadBack() throws {
        var w = ByteWriter(zeros: 8)
        let values: [Int64] = (0..<5000).map { Int64($0) * 1_000_003 * ($0 % 2 == 0 ? 1 : -1) } + [.max, .min]
        for v in values {
            w.int(v)
            w.string("member-\(v)")
        }
        let whole = w.bytes
        XCTAssertGreaterThan(w.capacity, 64 << 10)
        let half = whole.count / 2
        w.truncate(to: half, shrinkingAbove: 1024)
        XCTAssertEqual(w.count, half)
        XCTAssertLessThan(w.capacity, whole.count, "the memory beyond what is kept is let go")
        XCTAssertEqual(w.bytes, Array(whole[..<half]))
        w.truncate(to: 8)
        for v in values {
            w.int(v)
            w.string("member-\(v)")
        }
        XCTAssertEqual(w.bytes, whole, "written again after the cut, the same bytes")
        var r = ByteReader(bytes: Array(whole.dropFirst(8)))
        for v in values {
            XCTAssertEqual(try r.int(), v)
            XCTAssertEqual(try r.string(), "member-\(v)")
        }
        XCTAssertTrue(r.atEnd)
        XCTAssertEqual(whole.prefix(8), [0, 0, 0, 0, 0, 0, 0, 0], "room for a header, zeroed")
    }
}
