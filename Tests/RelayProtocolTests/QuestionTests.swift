import Foundation
import RelayProtocol
import XCTest

final class QuestionTests: XCTestCase {
    private let now = Timestamp(rfc3339: "2026-12-01T10:00:00Z")!

    /// Questions with every optional part, as a client may send them.
    static let asked: [String] = [
        #"{"id":"6f9619ff-8b86-d011-b42d-00cf4fc964ff","topic":{"kind":"communication","personInformation":[{"handle":{"value":"+1 (555) 010-0199","kind":"phoneNumber"},"nameComponents":{"givenName":"Kim","familyName":"Lee"},"avatarImage":"aGVsbG8=","extra":1},{"handle":{"kind":"emailAddress","value":"Sam@Example.org"},"avatarImage":null}],"actions":["message","audioCall","message"]},"choices":[{"id":"yes","title":"Yes \"for\" an hour","answer":"approval","durationSeconds":3600},{"id":"no","title":"No","answer":"denial"}],"defaultChoice":"yes","expirationDate":"2026-12-01T11:00:00.250Z","unknown":true}"#,
        #"{"topic":{"description":"Version 2\nadds chat","kind":"significantAppUpdate","actions":["chat"]},"id":"00000000-0000-4000-8000-00000000000A"}"#,
        #"{"id":"00000000-0000-4000-8000-00000000000b","topic":{"kind":"communication","personInformation":[{"handle":{"value":"kim#1","kind":"custom"},"nameComponents":null}]}}"#,
    ]

    /// Their canonical forms, byte for byte: known fields only, in a fixed order, ids upper
    /// case, defaults filled in (stored and sent on as they are, so they must not drift).
    static let canonical: [String] = [
        #"{"id":"6F9619FF-8B86-D011-B42D-00CF4FC964FF","topic":{"kind":"communication","personInformation":[{"handle":{"value":"+1 (555) 010-0199","kind":"phoneNumber"},"nameComponents":{"givenName":"Kim","familyName":"Lee"},"avatarImage":"aGVsbG8="},{"handle":{"value":"Sam@Example.org","kind":"emailAddress"},"avatarImage":null}],"actions":["message","audioCall"]},"choices":[{"id":"yes","title":"Yes \"for\" an hour","answer":"approval","durationSeconds":3600},{"id":"no","title":"No","answer":"denial"}],"defaultChoice":"yes","expirationDate":"2026-12-01T11:00:00.250Z"}"#,
        #"{"id":"00000000-0000-4000-8000-00000000000A","topic":{"kind":"significantAppUpdate","description":"Version 2\nadds chat"},"choices":[{"id":"approve","title":"Approve","answer":"approval"},{"id":"decline","title":"Decline","answer":"denial"}],"defaultChoice":"decline"}"#,
        #"{"id":"00000000-0000-4000-8000-00000000000B","topic":{"kind":"communication","personInformation":[{"handle":{"value":"kim#1","kind":"custom"},"avatarImage":null}],"actions":["communicate"]},"choices":[{"id":"approve","title":"Approve","answer":"approval"},{"id":"decline","title":"Decline","answer":"denial"}],"defaultChoice":"decline"}"#,
    ]

    func testCanonicalForm() throws {
        for (text, expected) in zip(Self.asked, Self.canonical) {
            let q = try XCTUnwrap(JSON.parse(text).object)
            let content = try QuestionContent.validate(q, now: now)
            XCTAssertEqual(String(decoding: content.encoded, as: UTF8.self), expected)
            let read = try XCTUnwrap(QuestionContent(encoded: content.encoded))
            XCTAssertEqual(read.key, content.key)
            XCTAssertEqual(read.handles, content.handles)
            XCTAssertEqual(read.actions, content.actions)
            XCTAssertEqual(read.choices, content.choices)
            XCTAssertEqual(read.expiration, content.expiration)
        }
        let first = try QuestionContent.validate(XCTUnwrap(JSON.parse(Self.asked[0]).object), now: now)
        XCTAssertEqual(Array(first.actions), ["message", "audioCall"], "as asked, once each")
        let none = try QuestionContent.validate(XCTUnwrap(JSON.parse(Self.asked[2]).object), now: now)
        XCTAssertEqual(Array(none.actions), ["communicate"])
    }

    /// A handle longer than a new one may be is refused in a question asked, yet read in one
    /// stored before the limit, or come through the hub from a relay without it.
    func testALongHandleIsRefusedWhenAskedButReadWhenStored() throws {
        let long = String(repeating: "k", count: NormalizedHandle.maxValueBytes + 1)
        // In its stored (canonical) form.
        let text =
            #"{"id":"00000000-0000-4000-8000-00000000000C","topic":{"kind":"communication","personInformation":[{"handle":{"value":"\#(long)","kind":"custom"},"avatarImage":null}],"actions":["communicate"]},"choices":[{"id":"approve","title":"Approve","answer":"approval"},{"id":"decline","title":"Decline","answer":"denial"}],"defaultChoice":"decline"}"#
        XCTAssertThrowsError(try QuestionContent.validate(XCTUnwrap(JSON.parse(text).object), now: now)) { error in
            XCTAssertEqual((error as? RequestError)?.code, .invalidQuestion)
        }
        let stored = try XCTUnwrap(QuestionContent(encoded: Array(text.utf8)))
        XCTAssertEqual(stored.handles.map(\.value), [long])
        let frame = #"{"type":"ask","id":"r","question":\#(text)}"#
        XCTAssertNil(QuestionContent.readAsk(Array(frame.utf8), now: now), "left to the full reading, which refuses it")
    }

    /// Name parts are text, as in PersonNameComponents (its phonetic representation
    /// included): anything else could make what is kept outgrow what was sent (a number is
    /// written out in full), which the limits on pending questions count on.
    func testNamesAreText() throws {
        func ask(_ names: String) throws -> QuestionContent {
            let text =
                #"{"id":"00000000-0000-4000-8000-00000000000c","topic":{"kind":"communication","personInformation":[{"handle":{"value":"kim#1","kind":"custom"},"nameComponents":"#
                + names + "}]}}"
            return try QuestionContent.validate(XCTUnwrap(JSON.parse(text).object), now: now)
        }
        let phonetic = #"{"givenName":"Kim","middleName":null,"phoneticRepresentation":{"givenName":"kɪm"}}"#
        XCTAssertTrue(String(decoding: try ask(phonetic).encoded, as: UTF8.self).contains(phonetic))
        for names in [#"{"givenName":1e14}"#, #"{"givenName":["Kim"]}"#, #"{"a":{"b":{"c":"d"}}}"#, #"{"givenName":true}"#] {
            XCTAssertThrowsError(try ask(names), names) { error in
                XCTAssertEqual((error as? RequestError)?.code, .invalidQuestion, names)
                XCTAssertTrue("\(error)".contains("nameComponents must hold only text"), "\(error)")
            }
        }
    }

    /// A list of handles built one by one holds what an array of them holds.
    func testHandleListHoldsItsHandlesInOrder() {
        var list = HandleList()
        var array: [NormalizedHandle] = []
        for n in 0..<5 {
            XCTAssertEqual(Array(list), array)
            XCTAssertEqual(list, HandleList(array))
            let h = NormalizedHandle(kind: .custom, value: "kim#\(n)")
            list.append(h)
            array.append(h)
        }
        XCTAssertEqual(list.count, 5)
        XCTAssertEqual(list[3].value, "kim#3")
        XCTAssertNotEqual(HandleList(Array(array.reversed())), list)
    }

    /// A list of actions keeps any of them, in the order given, and nothing else.
    func testActionListKeepsTheActionsInOrder() {
        var rng = SplitMix(seed: 5)
        for _ in 0..<500 {
            let names = (0..<Int(rng.next() % 16)).map { _ in communicationActions[Int(rng.next() % 10)] }
            let list = ActionList(names)
            XCTAssertEqual(list.map(Array.init), names.count <= 15 ? names : nil, "\(names)")
        }
        XCTAssertEqual(ActionList(["message", "chat"]).map(Array.init), ["message", "chat"])
        XCTAssertEqual(ActionList(["chat", "message"]).map(Array.init), ["chat", "message"])
        XCTAssertNotEqual(ActionList(["chat", "message"]), ActionList(["message", "chat"]))
        XCTAssertNil(ActionList(["message", "dance"]))
        XCTAssertNil(ActionList(Array(repeating: "chat", count: 16)))
        XCTAssertEqual(Array(ActionList.communicate), ["communicate"])
    }

    func testChoiceBytesAgreeWithItsJSON() {
        let choices = [
            Choice.approve, .decline, Choice(id: "a\"b", title: "Yes\n\u{1}é", answer: .approval, durationSeconds: 86400),
        ]
        for c in choices {
            var bytes: [UInt8] = []
            c.encode(into: &bytes)
            XCTAssertEqual(bytes, c.json.encoded)
        }
    }

    func testAStatusWrittenByNameIsItsRawValue() {
        for status in QuestionStatus.allCases {
            var bytes: [UInt8] = [UInt8(ascii: "{")]
            bytes.appendJSONField("status", name: status.name)
            bytes.append(UInt8(ascii: "}"))
            XCTAssertEqual(bytes, (["status": .string(status.rawValue)] as JSONObject).encoded)
        }
    }
}
