import RelayProtocol
import XCTest

/// `FlatRequest.read` against `JSON.parse` of the same frame.
final class FlatRequestTests: XCTestCase {
    private let uuid = QuestionID("6F9619FF-8B86-D011-B42D-00CF4FC964FF")!

    func testCommonFramesAreRead() {
        let cases: [(String, FlatRequest)] = [
            (
                #"{"type":"answer","id":"6F9619FF-8B86-D011-B42D-00CF4FC964FF","questionId":"6F9619FF-8B86-D011-B42D-00CF4FC964FF","choice":"approve"}"#,
                .answer(id: "6F9619FF-8B86-D011-B42D-00CF4FC964FF", question: uuid, choice: "approve")
            ),
            (
                #"{"choice":"decline","type":"answer","questionId":"6f9619ff-8b86-d011-b42d-00cf4fc964ff","id":"r9"}"#,
                .answer(id: "r9", question: uuid, choice: "decline")
            ),
            (#"{"type":"ack","seq":0}"#, .ack(seq: 0)),
            (" { \"seq\" : 120 , \"type\" : \"ack\" , \"id\" : \"a1\" } \n", .ack(seq: 120)),
        ]
        for (text, expected) in cases {
            XCTAssertEqual(FlatRequest.read(Array(text.utf8)), expected, text)
        }
    }

    func testFramesOfAnotherShapeAreLeftToTheParser() {
        for text in [
            #"{"type":"ack","seq":-1}"#, #"{"type":"ack","seq":1.0}"#, #"{"type":"ack","seq":01}"#, #"{"type":"ack","seq":1e3}"#,
            #"{"type":"ack","seq":1234567890123456789}"#, #"{"type":"ack"}"#, #"{"type":"ack","seq":1,"seq":2}"#,
            #"{"type":"ack","seq":1,"choice":"x"}"#, #"{"type":"answer","id":"r","questionId":"q"}"#,
            #"{"type":"answer","id":"r","questionId":"q","choice":"c"}"#,
            #"{"type":"answer","id":"r","questionId":"6F9619FF-8B86-D011-B42D-00CF4FC964F","choice":"c"}"#,
            #"{"type":"answer","id":"r","questionId":"q\u0041","choice":"c"}"#, #"{"type":"ping","id":"p"}"#,
            #"{"type":"ack","seq":1}x"#, #"{"type":"ack","seq":1,}"#, #"["type","ack"]"#,
        ] {
            XCTAssertNil(FlatRequest.read(Array(text.utf8)), text)
        }
    }

    /// Whatever is read is what parsing reads, on generated frames and mutations of them.
    func testAgreesWithParsingOnGeneratedAndMutatedFrames() throws {
        let (read, readMutated) = try readGeneratedAndMutated(seed: 11, rounds: 3000, mutations: 6, frame, read: agree)
        XCTAssertGreaterThan(read, 1000, "read directly")
        XCTAssertGreaterThan(readMutated, 300, "read directly after a mutation")
    }

    /// Whether `body` was read directly; fails the test where parsing reads it otherwise.
    private func agree(_ body: [UInt8]) throws -> Bool {
        guard let request = FlatRequest.read(body) else { return false }
        let text = String(decoding: body, as: UTF8.self)
        let frame = try XCTUnwrap(try? JSON.parse(body), "read, but not JSON: \(text)")
        switch request {
        case .answer(let id, let question, let choice):
            XCTAssertEqual(frame["type"]?.string, "answer", text)
            XCTAssertEqual(frame["id"]?.string, id, text)
            XCTAssertEqual(frame["questionId"]?.string.flatMap(QuestionID.init), question, text)
            XCTAssertEqual(frame["choice"]?.string, choice, text)
        case .ack(let seq):
            XCTAssertEqual(frame["type"]?.string, "ack", text)
            XCTAssertEqual(frame["seq"]?.int, seq, text)
            XCTAssertGreaterThanOrEqual(seq, 0, text)
        }
        return true
    }

    private func frame(_ rng: inout SplitMix) -> JSONObject {
        var fields: [JSONObject.Field]
        if rng.next() % 2 == 0 {
            fields = [
                .init("type", pick(["answer"], or: ["ack", 3], &rng)), .init("id", pick(["r1", "6F9619FF"], or: ["a\"b", 1], &rng)),
                .init(
                    "questionId",
                    pick(["6F9619FF-8B86-D011-B42D-00CF4FC964FF", "6f9619ff-8b86-d011-b42d-00cf4fc964ff"], or: ["Zoë", .null, "q"], &rng)),
                .init("choice", pick(["approve", "decline"], or: ["\t", true], &rng)),
            ]
        } else {
            fields = [
                .init("type", pick(["ack"], or: ["answer", "pong"], &rng)),
                .init("seq", pick([0, 7, 120, 99_999], or: [-1, .double(2.5), "3", .int(Int64.max)], &rng)),
            ]
            if rng.next() % 4 == 0 { fields.append(.init("id", pick(["a1"], or: [1], &rng))) }
        }
        if rng.next() % 10 == 0 { fields.remove(at: Int(rng.next() % UInt64(fields.count))) }
        if rng.next() % 20 == 0 { fields.append(.init("extra", 1)) }
        return JSONObject(rng.next() % 2 == 0 ? fields.shuffled(using: &rng) : fields)
    }
}
