import Foundation
import RelayProtocol
import XCTest

/// `QuestionContent.readAsk` against the way it stands in for: `JSON.parse` of the frame,
/// then `QuestionContent.validate` of its question.
final class AskReaderTests: XCTestCase {
    private let now = Timestamp(rfc3339: "2026-12-01T10:00:00Z")!

    /// Frames of the common shape, as clients write them: each must be read directly.
    static let common: [String] = [
        // The benchmark's.
        #"{"type":"ask","id":"00000001-0000-4000-8000-000000000001","question":{"id":"00000001-0000-4000-8000-000000000001","topic":{"kind":"communication","personInformation":[{"handle":{"value":"+1 (555) 010-0199","kind":"phoneNumber"},"nameComponents":{"givenName":"Kim","familyName":"Lee"}}],"actions":["message","audioCall"]}}}"#,
        // PermissionKit's: the question first, its choices and default choice written out.
        #"{"type":"ask","question":{"id":"6F9619FF-8B86-D011-B42D-00CF4FC964FF","topic":{"kind":"communication","personInformation":[{"handle":{"value":"sam@example.org","kind":"emailAddress"},"nameComponents":{"givenName":"Sam"},"avatarImage":"aGVsbG8="},{"handle":{"value":"kim#1","kind":"custom"},"avatarImage":null}],"actions":["audioCall","message"]},"choices":[{"id":"approve","title":"Approve","answer":"approval"},{"id":"decline","title":"Decline","answer":"denial"}],"defaultChoice":"decline","expirationDate":"2026-12-01T11:00:00.250Z"},"id":"r7"}"#,
        // Spaced out, an id in lower case, optional parts null or empty.
        """
        { "id" : "r8", "type" : "ask",
          "question" : { "id" : "6f9619ff-8b86-d011-b42d-00cf4fc964ff",
            "topic" : { "kind" : "communication", "personInformation" : [ { "handle" : { "value" : "+44 20 7946 0000", "kind" : "phoneNumber" }, "nameComponents" : { }, "avatarImage" : null } ], "actions" : [ ] },
            "choices" : null, "defaultChoice" : "approve", "expirationDate" : null } }
        """,
    ]

    func testCommonFramesAreReadAsParsingAndValidationRead() throws {
        for text in Self.common {
            let body = Array(text.utf8)
            XCTAssertNotNil(QuestionContent.readAsk(body, now: now), text)
            XCTAssertTrue(try agree(body), text)
        }
    }

    /// The most a canonical form adds to its frame (a `null` avatar for each of the most
    /// persons a question may name, the default choices, default choice and actions) fits
    /// the room it is put together in: such a question is read directly all the same.
    func testAQuestionThatGrowsTheMostIsReadDirectly() throws {
        let person = #"{"handle":{"value":"a","kind":"custom"}}"#
        let persons = Array(repeating: person, count: QuestionLimits.maxPersons).joined(separator: ",")
        let text =
            #"{"type":"ask","id":"r","question":{"id":"6F9619FF-8B86-D011-B42D-00CF4FC964FF","topic":{"kind":"communication","personInformation":["#
            + persons + "]}}}"
        let body = Array(text.utf8)
        let (_, read) = try XCTUnwrap(QuestionContent.readAsk(body, now: now))
        XCTAssertGreaterThan(read.encoded.count, body.count + 20 * QuestionLimits.maxPersons, "it grew by a null avatar a person, at least")
        XCTAssertTrue(try agree(body))
    }

    /// A relay keeps many questions: their encodings keep no unused room worth the name,
    /// read directly or through parsing and validation.
    func testAQuestionKeepsLittleUnusedRoom() throws {
        for text in Self.common {
            let body = Array(text.utf8)
            let (_, read) = try XCTUnwrap(QuestionContent.readAsk(body, now: now))
            let validated = try QuestionContent.validate(try XCTUnwrap(try JSON.parse(body)["question"]?.object), now: now)
            for q in [read, validated] { XCTAssertLessThanOrEqual(q.encoded.capacity - q.encoded.count, 64, text) }
        }
    }

    /// Every frame read directly is one parsing and validation accept, with the same id and
    /// question, field for field; on generated frames (fields in many orders, optional parts
    /// absent, null or odd, valid and invalid values, spacing) and, for those read, on
    /// mutations of them.
    func testAgreesWithParsingAndValidationOnGeneratedAndMutatedFrames() throws {
        var valid = 0
        let (read, readMutated) = try readGeneratedAndMutated(
            seed: 7, rounds: 4000, mutations: 8, frame, seen: { if isValidAsk($0) { valid += 1 } }, read: agree)
        // Enough of each kind that the comparison means something.
        XCTAssertGreaterThan(read, 300, "read directly")
        XCTAssertGreaterThan(readMutated, 80, "read directly after a mutation")
        XCTAssertGreaterThan(valid - read, 500, "valid, but left to parsing and validation")
    }

    /// Whether `body` was read directly; fails the test where that disagrees with parsing
    /// and validation.
    private func agree(_ body: [UInt8]) throws -> Bool {
        guard let (id, fast) = QuestionContent.readAsk(body, now: now) else { return false }
        let text = String(decoding: body, as: UTF8.self)
        let frame = try XCTUnwrap(try? JSON.parse(body), "read, but not JSON: \(text)")
        XCTAssertEqual(frame["type"]?.string, "ask", text)
        XCTAssertEqual(frame["id"]?.string, id, text)
        let question = try XCTUnwrap(frame["question"]?.object, text)
        let slow: QuestionContent
        do {
            slow = try QuestionContent.validate(question, now: now)
        } catch {
            XCTFail("read, but invalid (\(error.message)): \(text)")
            return true
        }
        XCTAssertEqual(String(decoding: fast.encoded, as: UTF8.self), String(decoding: slow.encoded, as: UTF8.self), text)
        XCTAssertEqual(fast.id, slow.id, text)
        XCTAssertEqual(fast.key, slow.key, text)
        XCTAssertEqual(fast.kind, slow.kind, text)
        XCTAssertEqual(fast.handles, slow.handles, text)
        XCTAssertEqual(fast.actions, slow.actions, text)
        XCTAssertEqual(fast.choices, slow.choices, text)
        XCTAssertEqual(fast.defaultChoice, slow.defaultChoice, text)
        XCTAssertEqual(fast.expiration, slow.expiration, text)
        return true
    }

    private func isValidAsk(_ body: [UInt8]) -> Bool {
        guard let frame = try? JSON.parse(body), frame["type"]?.string == "ask", frame["id"]?.string != nil,
            let q = frame["question"]?.object
        else { return false }
        return (try? QuestionContent.validate(q, now: now)) != nil
    }

    // MARK: - Generated frames

    private func frame(_ rng: inout SplitMix) -> JSONObject {
        var fields: [JSONObject.Field] = [
            .init("type", pick(["ask"], or: ["answer", 1], &rng)),
            .init("id", pick(["r1"], or: ["a \"quoted\" id", 2], &rng)),
            .init("question", .object(question(&rng))),
        ]
        if rng.next() % 20 == 0 { fields.append(.init("extra", true)) }
        return JSONObject(shuffledSometimes(fields, &rng))
    }

    private func question(_ rng: inout SplitMix) -> JSONObject {
        var fields: [JSONObject.Field] = [
            .init(
                "id",
                pick(
                    ["6F9619FF-8B86-D011-B42D-00CF4FC964FF", "6f9619ff-8b86-d011-b42d-00cf4fc964ff"],
                    or: ["6F9619FF-8B86-D011-B42D-00CF4FC964FG", 5], &rng)),
            .init("topic", .object(topic(&rng))),
        ]
        let defaultChoices: JSON = [
            .object(["id": "approve", "title": "Approve", "answer": "approval"]),
            .object(["id": "decline", "title": "Decline", "answer": "denial"]),
        ]
        let custom: JSON = [
            .object(["id": "yes", "title": "Yes", "answer": "approval", "durationSeconds": 60]),
            .object(["id": "no", "title": "No", "answer": "denial"]),
        ]
        let optional: [(String, good: [JSON?], bad: [JSON?])] = [
            ("choices", [nil, .null, defaultChoices], [custom, [], "approve"]),
            ("defaultChoice", [nil, .null, "approve", "decline"], ["yes", "maybe", 3]),
            (
                "expirationDate", [nil, .null, "2026-12-01T11:00:00Z", "2026-12-01T11:00:00.250+01:00"],
                ["2026-12-01T09:00:00Z", "tomorrow"]
            ),
        ]
        for (name, good, bad) in optional {
            if let v = pick(good, or: bad, &rng) { fields.append(.init(name, v)) }
        }
        if rng.next() % 20 == 0 { fields.append(.init("extra", 1)) }
        return JSONObject(shuffledSometimes(fields, &rng))
    }

    private func topic(_ rng: inout SplitMix) -> JSONObject {
        if rng.next() % 10 == 0 {
            return ["kind": "significantAppUpdate", "description": pick(["Version 2"], or: [" ", "Zoë"], &rng)]
        }
        var fields: [JSONObject.Field] = [
            .init("kind", pick(["communication"], or: ["weather"], &rng)),
            .init("personInformation", .array((0..<[1, 1, 1, 2, 3, 0][Int(rng.next() % 6)]).map { _ in .object(person(&rng)) })),
        ]
        let actions: JSON? = pick([nil, .null, [], ["message", "audioCall"], ["message", "message"]], or: [["dance"], "message"], &rng)
        if let actions { fields.append(.init("actions", actions)) }
        return JSONObject(shuffledSometimes(fields, &rng))
    }

    private func person(_ rng: inout SplitMix) -> JSONObject {
        let handles: [(JSON, JSON)] = [
            ("+1 (555) 010-0199", "phoneNumber"), (" +44 20 7946 0000", "phoneNumber"), (" 555-0100 ", "phoneNumber"),
            ("Sam@Example.org", "emailAddress"), ("kim#1", "custom"),
        ]
        let (value, kind) = handles[Int(rng.next() % UInt64(handles.count))]
        var handle: [JSONObject.Field] = [
            .init("value", pick([value], or: ["()", "kim", "", "Zoë", "tab\there", 4], &rng)),
            .init("kind", pick([kind], or: ["phoneNumber", "emailAddress", "custom", "fax"], &rng)),
        ]
        if rng.next() % 20 == 0 { handle.append(.init("label", "home")) }
        var fields: [JSONObject.Field] = [.init("handle", .object(JSONObject(shuffledSometimes(handle, &rng))))]
        let names: JSON? = pick(
            [nil, .null, .object([:]), .object(["givenName": "Kim", "familyName": "Lee"])],
            or: [
                .object(JSONObject([.init("givenName", "Kim"), .init("givenName", "Kimberly")])), .object(["givenName": 1]),
                "Kim", .object(["givenName": "Zoë"]),
            ], &rng)
        if let names { fields.append(.init("nameComponents", names)) }
        if let avatar = pick([nil, .null, "aGVsbG8="] as [JSON?], or: ["not base64!", 12], &rng) {
            fields.append(.init("avatarImage", avatar))
        }
        return JSONObject(shuffledSometimes(fields, &rng))
    }

    /// In the order given seven times in eight.
    private func shuffledSometimes(_ fields: [JSONObject.Field], _ rng: inout SplitMix) -> [JSONObject.Field] {
        rng.next() % 8 == 0 ? fields.shuffled(using: &rng) : fields
    }
}
