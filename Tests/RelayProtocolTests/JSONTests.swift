import Foundation
import RelayProtocol
import XCTest

final class JSONTests: XCTestCase {
    func testRoundTripsAndTypes() throws {
        let text = #"{"a":1,"b":-2.5,"c":true,"d":null,"e":"x\"\\\n\u00e9\ud83d\ude00","f":[1,[2,{}]],"g":{"h":false}}"#
        let v = try JSON.parse(text)
        XCTAssertEqual(v["a"], .int(1))
        XCTAssertEqual(v["b"], .double(-2.5))
        XCTAssertEqual(v["c"], .bool(true))
        XCTAssertEqual(v["d"], .null)
        XCTAssertEqual(v["e"]?.string, "x\"\\\né😀")
        XCTAssertEqual(try JSON.parse(v.encoded), v)
        XCTAssertEqual(try JSON.parse("1e3"), .double(1000))
        XCTAssertEqual(try JSON.parse(" 0 "), .int(0))
    }

    /// JSON puts no bound on numbers: those beyond a double's range read as infinite (and
    /// are then no integer), those too small as zero, and a frame holding one stays readable.
    func testNumbersBeyondADoublesRangeReadAsInfinite() throws {
        XCTAssertEqual(try JSON.parse("1e999"), .double(.infinity))
        XCTAssertEqual(try JSON.parse("-1E+400"), .double(-.infinity))
        XCTAssertEqual(try JSON.parse(String(repeating: "9", count: 400)), .double(.infinity))
        XCTAssertEqual(try JSON.parse("1e-999"), .double(0))
        let frame = try JSON.parse(#"{"type":"ack","id":"a","seq":1e400}"#)
        XCTAssertEqual(frame["id"]?.string, "a")
        XCTAssertNil(frame["seq"]?.int)
        XCTAssertNil(frame["seq"]?.number)
        XCTAssertEqual(frame["seq"]?.encoded, Array("null".utf8))
    }

    func testRejectsMalformedInput() {
        let bad = [
            "", "{", "[1,]", "{\"a\":}", "01", "1.", "-", "tru", "\"\u{01}\"", "\"\\x\"", "{\"a\" 1}", "[1] 2",
            "\"\\ud800\"", "\"\\udc00x\"", "NaN", "Infinity", "-Infinity", "1e", "{'a':1}",
        ]
        for s in bad {
            XCTAssertThrowsError(try JSON.parse(s), s)
        }
        XCTAssertThrowsError(try JSON.parse([0x22, 0xFF, 0xFE, 0x22]), "invalid UTF-8")
        XCTAssertThrowsError(try JSON.parse([0x22, 0xC3, 0x22]), "truncated UTF-8")
    }

    func testNestingIsBounded() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        XCTAssertThrowsError(try JSON.parse(deep)) { XCTAssertTrue(($0 as? JSONParseError)?.tooDeep ?? false) }
        let ok = String(repeating: "[", count: 60) + String(repeating: "]", count: 60)
        XCTAssertNoThrow(try JSON.parse(ok))
        XCTAssertThrowsError(try JSON.parse("[1,]")) { XCTAssertFalse(($0 as? JSONParseError)?.tooDeep ?? true) }
    }

    /// Half a surrogate pair escaped alone is JSON that no Unicode text holds: refused by
    /// `parse`, read as U+FFFD by `parseLeniently`; a whole pair is one character.
    func testUnpairedSurrogateEscapesAreJSONThatParseRefuses() throws {
        func lenient(_ text: String) throws -> (json: JSON, replaced: Bool) {
            let read = try Array(text.utf8).withUnsafeBufferPointer { try JSON.parseLeniently($0) }
            XCTAssertFalse(read.truncated, text)
            return (read.json, read.replaced)
        }
        for (text, read) in [
            (#""\ud83d""#, "\u{FFFD}"), (#""\uDE00x""#, "\u{FFFD}x"), (#""\ud83d\u0041""#, "\u{FFFD}A"),
            (#""\ud83d\ud83d\ude00""#, "\u{FFFD}😀"), (#""a\ud83d""#, "a\u{FFFD}"),
        ] {
            XCTAssertThrowsError(try JSON.parse(text), text) { error in
                let e = error as? JSONParseError
                XCTAssertEqual(e?.unpairedSurrogate, true, text)
                XCTAssertEqual(e?.isJSON, true, text)
            }
            XCTAssertEqual(try lenient(text).json, .string(read), text)
            XCTAssertEqual(try lenient(text).replaced, true, text)
        }
        XCTAssertEqual(try JSON.parse(#""\ud83d\ude00""#), .string("😀"))
        XCTAssertEqual(try lenient(#""\ud83d\ude00""#).replaced, false)
        // What follows is still read as JSON, and refused when it is not.
        XCTAssertThrowsError(try lenient(#""\ud83d\u00""#))
        XCTAssertThrowsError(try lenient(#""\ud83d\x""#))
    }

    /// A document nested too deep is still JSON: read with what is too deep checked and
    /// taken as null, however deep it goes; anything that is not JSON in there is still refused.
    func testWhatIsNestedTooDeepIsCheckedAndReadAsNull() throws {
        func truncating(_ text: String) throws -> (json: JSON, truncated: Bool) {
            let read = try Array(text.utf8).withUnsafeBufferPointer { try JSON.parseLeniently($0) }
            return (read.json, read.truncated)
        }
        func nested(_ depth: Int, _ inner: String) -> String {
            (0..<depth).map { $0 % 2 == 0 ? "[" : #"{"k":"# }.joined() + inner
                + (0..<depth).reversed().map { $0 % 2 == 0 ? "]" : "}" }.joined()
        }
        // Levels in all: the outer object's, `depth`, and the inner list's three.
        for depth in [JSON.maxDepth - 4, JSON.maxDepth - 3, 100_000] {
            let text = #"{"id":"x","deep":"# + nested(depth, #"[1, "two", {"three": [true, false, null, -4.5e1]}, {}, []]"#) + "}"
            let (json, truncated) = try truncating(text)
            XCTAssertEqual(json["id"]?.string, "x", "depth \(depth)")
            XCTAssertEqual(truncated, 1 + depth + 3 > JSON.maxDepth, "depth \(depth)")
            if !truncated { XCTAssertEqual(json, try JSON.parse(text)) }
            XCTAssertThrowsError(try truncating(#"{"id":"x","deep":"# + nested(depth, "[1,]") + "}"), "depth \(depth)")
            XCTAssertThrowsError(try truncating(#"{"id":"x","deep":"# + nested(depth, #"{"a" 1}"#) + "}"), "depth \(depth)")
            XCTAssertThrowsError(try truncating(#"{"id":"x","deep":"# + nested(depth, "[\"\u{01}\"]") + "}"), "depth \(depth)")
            XCTAssertThrowsError(try truncating(String(text.dropLast(2))), "depth \(depth), cut short")
        }
        XCTAssertEqual(try truncating(#"{"a":[1,{"b":[]}]}"#).json, try JSON.parse(#"{"a":[1,{"b":[]}]}"#))
        XCTAssertEqual(try truncating(#"{"a":[1,{"b":[]}]}"#).truncated, false)
    }

    /// Foundation's JSONSerialization is the reference: on generated and mutated documents
    /// both must agree on whether the text is JSON and, if it is, on the value.
    func testAgreesWithFoundationOnGeneratedAndMutatedInputs() throws {
        var rng = SplitMix(seed: 42)
        var accepted = 0
        for round in 0..<3000 {
            var bytes = Array(random(depth: 0, &rng).encoded)
            if round % 2 == 1 { rng.mutate(&bytes) }
            let ours = try? JSON.parse(bytes)
            let theirs = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
            let text = String(decoding: bytes, as: UTF8.self)
            if let ours, let theirs {
                accepted += 1
                XCTAssertTrue(same(ours, theirs), "values differ for \(text)")
            } else if (ours == nil) != (theirs == nil), !foundationLeniency(bytes) {
                XCTFail("acceptance differs (ours \(ours != nil), Foundation \(theirs != nil)) for \(text)")
            }
        }
        XCTAssertGreaterThan(accepted, 1500)
    }

    /// Field names and common values come from a table of made strings; near misses
    /// (a byte more, a byte less, one byte changed, at the end of the input or not) must
    /// still read as themselves.
    func testWordsAndNearMissesReadAsWritten() throws {
        let words = [
            "type", "id", "seq", "ask", "questionId", "question", "questions", "questionClosed", "personInformation",
            "significantAppUpdate", "expirationDate", "durationSeconds", "phoneNumber", "communication", "approve", "a",
            "abcdefgh", "abcdefghijklmnop", "abcdefghijklmnopqrstuvwx", "abcdefghijklmnopqrstuvwxy",
        ]
        var cases: [String] = []
        for w in words {
            cases += [w, w + "x", String(w.dropLast()), "x" + w, w.uppercased(), String(w.dropFirst())]
            for k in [0, w.utf8.count / 2, w.utf8.count - 1] {
                var b = Array(w.utf8)
                b[k] ^= 0x01
                cases.append(String(decoding: b, as: UTF8.self))
            }
        }
        for c in cases where !c.isEmpty {
            XCTAssertEqual(try JSON.parse("\"\(c)\""), .string(c), "alone: \(c)")
            XCTAssertEqual(try JSON.parse("{\"\(c)\":\"\(c)\",\"next\":[\"\(c)\"]}")["\(c)"], .string(c), "in an object: \(c)")
            XCTAssertEqual(try JSON.parse("{\"next\":[\"\(c)\"]}")["next"], .array([.string(c)]), "in a list: \(c)")
        }
    }

    func testIntegersAreWrittenAsSwiftWritesThem() {
        var rng = SplitMix(seed: 7)
        let edges: [Int64] = [0, 1, -1, 9, 10, -10, 99, 100, Int64.max, Int64.min, Int64.max - 1, Int64.min + 1]
        for v in edges + (0..<2000).map({ _ in Int64(bitPattern: rng.next()) >> Int64(rng.next() % 64) }) {
            XCTAssertEqual(String(decoding: JSON.int(v).encoded, as: UTF8.self), String(v))
            var field: [UInt8] = [UInt8(ascii: "{")]
            field.appendJSONField("n", v)
            XCTAssertEqual(String(decoding: field, as: UTF8.self), #"{"n":"# + String(v))
        }
    }

    /// Short strings are quoted in one append and long ones in three: every length on both
    /// sides of the line comes out the same.
    func testStringsOfEveryLengthAreQuotedWhole() throws {
        for filler in ["a", "é"] {
            for length in 0...140 {
                let s = String(repeating: filler, count: length)
                let encoded = JSON.string(s).encoded
                XCTAssertEqual(encoded, [0x22] + Array(s.utf8) + [0x22], "\(length) × \(filler)")
                for value in [s, s + "\"\n"] {  // as it stands, and needing escapes
                    var field: [UInt8] = [UInt8(ascii: "{")]
                    field.appendJSONField("k", value)
                    XCTAssertEqual(try JSON.parse(field + [UInt8(ascii: "}")])["k"]?.string, value)
                }
            }
        }
    }

    /// An object's short string fields are written in one append each: keys and values of
    /// lengths about the limit, plain and needing escapes, first and later, read back whole.
    func testObjectStringFieldsOfEveryLengthReadBack() throws {
        for keyLength in 1...70 {
            for valueLength in [0, 1, 30, 62, 63, 64, 65, 100] {
                for escaped in [false, true] {
                    let key = String(repeating: "k", count: keyLength) + (escaped ? "\\" : "")
                    let value = String(repeating: "é", count: valueLength) + (escaped ? "\"\n" : "")
                    let object: JSONObject = [key: .string(value), "n": 1, "z": .string(value)]
                    let encoded = JSON.object(object).encoded
                    XCTAssertEqual(try JSON.parse(encoded), .object(object), "key \(keyLength), value \(valueLength)")
                    let theirs = try JSONSerialization.jsonObject(with: Data(encoded)) as? [String: Any]
                    XCTAssertEqual(theirs?[key] as? String, value)
                    XCTAssertEqual(theirs?["z"] as? String, value)
                }
            }
        }
    }

    func testNumbersJSONCannotHoldAreWrittenAsNull() throws {
        for d in [Double.nan, .infinity, -.infinity] {
            let encoded = JSON.object(["x": .double(d)]).encoded
            XCTAssertEqual(String(decoding: encoded, as: UTF8.self), #"{"x":null}"#)
            XCTAssertNoThrow(try JSONSerialization.jsonObject(with: Data(encoded)))
        }
    }

    func testKeysTakeACommaAfterAFieldOnly() {
        var out: [UInt8] = []
        out.appendJSONKey("a")
        XCTAssertEqual(String(decoding: out, as: UTF8.self), #""a":"#)
        out = Array("{".utf8)
        out.appendJSONKey("key")
        out.appendJSONInteger(1)
        out.appendJSONKey("b")
        XCTAssertEqual(String(decoding: out, as: UTF8.self), #"{"key":1,"b":"#)
    }

    /// The encoder checks strings for bytes to escape eight at a time: every ASCII byte, at
    /// every position of strings long enough to take that path, beside multi-byte text,
    /// must come back whole through Foundation's parser and ours.
    func testEveryByteIsEscapedWhereverItStands() throws {
        for length in 1...19 {
            for position in 0..<length {
                for byte in UInt8(0)...UInt8(127) {
                    for filler in ["a", "é"] {
                        var chars = Array(repeating: Character(filler), count: length)
                        chars[position] = Character(Unicode.Scalar(byte))
                        let s = String(chars)
                        let encoded = JSON.string(s).encoded
                        let theirs = try JSONSerialization.jsonObject(with: Data(encoded), options: [.fragmentsAllowed])
                        XCTAssertEqual(theirs as? String, s, "byte \(byte) at \(position) of \(length)")
                        XCTAssertEqual(try JSON.parse(encoded).string, s)
                    }
                }
                // Raw, a control character or a byte that is not UTF-8 is refused wherever it stands.
                for bad: UInt8 in [0x00, 0x1F, 0x80, 0xC3, 0xFF] {
                    var raw = [UInt8](repeating: UInt8(ascii: "a"), count: length)
                    raw[position] = bad
                    XCTAssertThrowsError(try JSON.parse([0x22] + raw + [0x22]), "byte \(bad) at \(position) of \(length)")
                }
            }
        }
    }

    /// A string is never written longer than the shortest JSON that gives it: what the relay
    /// stores and sends of a question outgrows the frame it came in by nothing.
    func testEachCharacterIsWrittenNoLongerThanItsShortestEscape() throws {
        for byte in UInt8(0)..<0x20 {
            let s = String(Unicode.Scalar(byte))
            let shortest = [0x08, 0x09, 0x0A, 0x0C, 0x0D].contains(byte) ? 4 : 8  // "\b" or "\u0001", quoted
            XCTAssertEqual(JSON.string(s).encoded.count, shortest, "byte \(byte)")
        }
        XCTAssertEqual(JSON.string("\u{8}\u{C}").encoded, Array(#""\b\f""#.utf8))
    }

    /// Documents Foundation accepts although RFC 8259 does not (or the reverse): lone
    /// surrogate escapes and numbers Foundation reads with a different range.
    private func foundationLeniency(_ bytes: [UInt8]) -> Bool {
        let s = String(decoding: bytes, as: UTF8.self)
        return s.contains("\\u") || s.range(of: "[0-9.][eE]", options: .regularExpression) != nil
    }

    private func same(_ a: JSON, _ b: Any) -> Bool {
        switch a {
        case .null: return b is NSNull
        case .bool(let x): return (b as? Bool) == x
        case .int(let x): return (b as? NSNumber)?.int64Value == x || (b as? Int).map { Int64($0) == x } == true
        case .double(let x): return (b as? NSNumber).map { abs($0.doubleValue - x) <= abs(x) * 1e-12 } ?? false
        case .string(let x): return b as? String == x
        case .array(let xs):
            guard let ys = b as? [Any], xs.count == ys.count else { return false }
            return zip(xs, ys).allSatisfy { same($0, $1) }
        case .object(let o):
            guard let d = b as? [String: Any] else { return false }
            var last: [String: JSON] = [:]
            for f in o.fields { last[f.key] = f.value }
            return last.count == d.count && last.allSatisfy { k, v in d[k].map { same(v, $0) } ?? false }
        }
    }

    private func random(depth: Int, _ rng: inout SplitMix) -> JSON {
        switch rng.next() % (depth > 3 ? 5 : 7) {
        case 0: return .null
        case 1: return .bool(rng.next() % 2 == 0)
        case 2: return .int(Int64(bitPattern: rng.next()) >> Int64(rng.next() % 64))
        case 3: return .double(Double(Int64(bitPattern: rng.next() >> 20)) / 1024)
        case 4:
            let alphabet = Array("ab\"\\/\n\té😀 {}[]:,\u{7}")
            return .string(String((0..<Int(rng.next() % 8)).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] }))
        case 5: return .array((0..<Int(rng.next() % 4)).map { _ in random(depth: depth + 1, &rng) })
        default:
            return .object(JSONObject((0..<Int(rng.next() % 4)).map { i in JSONObject.Field("k\(i)", random(depth: depth + 1, &rng)) }))
        }
    }
}
