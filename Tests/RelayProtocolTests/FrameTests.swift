import RelayProtocol
import XCTest

final class FrameTests: XCTestCase {
    /// Decodes `bytes` fed in chunks: through `next`, or `inPlace` through `withNextFrame`.
    private func decodeAll(_ bytes: [UInt8], chunk: Int, max: Int = 1024, inPlace: Bool = false) -> [FrameEvent] {
        var d = FrameDecoder(maxFrameBytes: max)
        var out: [FrameEvent] = []
        var i = 0
        while i < bytes.count {
            let part = bytes[i..<min(i + chunk, bytes.count)]
            i += chunk
            guard inPlace else {
                d.append(part)
                while let e = d.next() { out.append(e) }
                continue
            }
            part.withUnsafeBytes { d.append($0) }
            reading: while true {
                switch d.withNextFrame({ out.append(.frame(Array($0))) }) {
                case .frame: continue
                case .violation(let code, let message): out.append(.violation(code, message))
                case .incomplete: break reading
                }
            }
        }
        return out
    }

    func testSameFramesWhateverTheChunking() {
        let bodies: [[UInt8]] = [Array(#"{"type":"ping"}"#.utf8), Array(repeating: 0x20, count: 300), [0x7B, 0x7D]]
        let stream = bodies.flatMap(framed)
        for chunk in [1, 2, 3, 5, 7, 64, stream.count] {
            XCTAssertEqual(decodeAll(stream, chunk: chunk), bodies.map { .frame($0) }, "chunk \(chunk)")
            XCTAssertEqual(decodeAll(stream, chunk: chunk, inPlace: true), bodies.map { .frame($0) }, "in place, chunk \(chunk)")
        }
    }

    func testLengthViolationsAreDecidedOnTheHeaderAlone() {
        for inPlace in [false, true] {
            XCTAssertEqual(
                decodeAll([0, 0, 0, 0], chunk: 1, inPlace: inPlace), [.violation(.badFrame, "a frame of length 0 is not allowed")])
            let over = decodeAll([0, 0, 4, 1], chunk: 4, inPlace: inPlace)
            guard case .violation(.frameTooLarge, _)? = over.first else { return XCTFail("expected frameTooLarge, got \(over)") }
            let atMax = framed(Array(repeating: 0x20, count: 1024))
            XCTAssertEqual(decodeAll(atMax, chunk: 100, inPlace: inPlace).count, 1)
            XCTAssertEqual(
                decodeAll([0, 0, 0, 0] + framed([1]), chunk: 9, max: 10, inPlace: inPlace).count, 1,
                "nothing is read after a violation")
        }
    }

    func testFramesAppendedAfterOtherBytesKeepThemAndDecode() {
        let long = Array(repeating: UInt8(0x61), count: 70_000)  // a length that needs three bytes
        var out: [UInt8] = [9, 9]
        out.appendFrame { $0.append(contentsOf: long) }
        out.appendFrame { $0.append(contentsOf: [0x7B, 0x7D]) }
        XCTAssertEqual(Array(out.prefix(6)), [9, 9, 0, 1, 0x11, 0x70])
        XCTAssertEqual(decodeAll(Array(out.dropFirst(2)), chunk: 4096, max: 1 << 20), [.frame(long), .frame([0x7B, 0x7D])])
        XCTAssertEqual(framed(long), Array(out[2..<(2 + 4 + long.count)]))
    }

    func testFrameOfAnObject() throws {
        let o: JSONObject = ["type": "ok", "re": "1"]
        let f = o.frame
        XCTAssertEqual(Array(f.prefix(4)), [0, 0, 0, UInt8(f.count - 4)])
        XCTAssertEqual(try JSON.parse(f.dropFirst(4)), .object(o))
    }
}
