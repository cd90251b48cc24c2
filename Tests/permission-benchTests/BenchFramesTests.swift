// The load generator's frames: the ask it builds is one the relay reads in its fast path,
// with an id that says the family, the run and the question's number; and what it reads of
// each frame (type and seq) comes out right, since every cycle and ack depends on it.

import RelayProtocol
import XCTest

@testable import permission_bench

final class BenchFramesTests: XCTestCase {
    func testAnAsksIdSaysTheFamilyTheRunAndTheNumberAndTheRelayReadsItInOnePass() throws {
        for (family, number, run) in [(0, 1, 0), (7, 123_456, 0xABC_DEF1), (99, 0xFFFF_FFFF_FFFF, (1 << 28) - 1)] {
            let frames = BenchFrames(avatarBytes: 0, run: run)
            let body = frames.ask(family: family, number: number)
            let (requestID, question) = try XCTUnwrap(
                QuestionContent.readAsk(body, now: Timestamp(milliseconds: 0)), "the relay's one-pass reader takes the ask")
            let id = Array(requestID.utf8)
            XCTAssertEqual(question.id, requestID, "the question's id is the request's")
            XCTAssertEqual(id.count, 36)
            XCTAssertEqual(String(decoding: id[0..<8], as: UTF8.self), hex(family, 8))
            let runDigits = id[9..<13] + id[15..<18]  // around the version digit
            XCTAssertEqual(String(decoding: runDigits, as: UTF8.self), hex(run, 7))
            XCTAssertEqual(id.withUnsafeBufferPointer(BenchFrames.number(inID:)), number)
            var appended: [UInt8] = []
            frames.appendID(family: family, number: number, to: &appended)
            XCTAssertEqual(appended, id, "appendID writes the id the ask carries")
        }
    }

    func testAFramesHeadIsItsTypeAndTheSeqAfterIt() {
        head(#"{"type":"response","seq":42,"question":{"id":"x"}}"#) { h, body in
            XCTAssertEqual(h?.is("response"), true)
            XCTAssertEqual(h?.is("respons"), false)
            XCTAssertEqual(h?.is("question"), false)
            XCTAssertEqual(h?.seq, 42)
            XCTAssertEqual(h.map { Array(body[$0.end...].prefix(8)) }, Array(#"","seq":"#.utf8))
        }
        head(#"{"type":"ok","re":"a request id of some length","seq":7}"#) { h, _ in
            XCTAssertEqual(h?.is("ok"), true)
            XCTAssertNil(h?.seq, "a seq far from the type is no event's")
        }
        head(#"{"type":"ack","seq":0}"#) { h, _ in XCTAssertEqual(h?.seq, 0) }
        // Every event is acknowledged, also those of a type longer than the first's.
        head(#"{"type":"knownHandlesChanged","seq":123456,"added":[],"removed":[]}"#) { h, _ in XCTAssertEqual(h?.seq, 123456) }
        head(#"{"re":"a","code":"badRequest","type":"error"}"#) { h, _ in XCTAssertNil(h, "a type far from the start") }
        head(#"{"type":"unterminated"#) { h, _ in XCTAssertNil(h) }
        head(#"{"seq":3}"#) { h, _ in XCTAssertNil(h) }
    }

    private func head(_ frame: String, _ check: (BenchFrames.Head?, UnsafeBufferPointer<UInt8>) -> Void) {
        Array(frame.utf8).withUnsafeBufferPointer { check(BenchFrames.Head($0), $0) }
    }

    private func hex(_ v: Int, _ digits: Int) -> String {
        let s = String(v, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, digits - s.count)) + s.suffix(digits)
    }
}
