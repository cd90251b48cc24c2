// The benchmark's frames, built by splicing bytes so that building them costs little
// beside the relay: one communication question (a person with a phone handle, two
// actions), its answer, and acks.

import Foundation
import RelayProtocol

struct BenchFrames {
    // {"type":"ask","id":"<ID>","question":{"id":"<ID>",…}} split around the two ids.
    private let askPrefix: [UInt8]
    private let askMiddle: [UInt8]
    private let askSuffix: [UInt8]
    /// Written into every question id, so that runs against the same relay ask new questions.
    let run: Int

    /// `run` must be below 2^28.
    init(avatarBytes: Int, run: Int = 0) {
        self.run = run
        var person: JSONObject = [
            "handle": .object(["value": "+1 (555) 010-0199", "kind": "phoneNumber"]),
            "nameComponents": .object(["givenName": "Kim", "familyName": "Lee"]),
        ]
        if avatarBytes > 0 { person["avatarImage"] = .string(Data(repeating: 7, count: avatarBytes).base64EncodedString()) }
        let placeholder = "@@@@@@@@-@@@@-@@@@-@@@@-@@@@@@@@@@@@"
        let ask: JSONObject = [
            "type": "ask", "id": .string(placeholder),
            "question": .object([
                "id": .string(placeholder),
                "topic": .object(["kind": "communication", "personInformation": [.object(person)], "actions": ["message", "audioCall"]]),
            ]),
        ]
        let bytes = ask.encoded
        let p = Array(placeholder.utf8)
        let first = find(p, in: bytes)!
        let second = find(p, in: bytes, from: first + 36)!
        askPrefix = Array(bytes[..<first])
        askMiddle = Array(bytes[(first + 36)..<second])
        askSuffix = Array(bytes[(second + 36)...])
    }

    /// The body of the ask for question `number` of `family`.
    func ask(family: Int, number: Int) -> [UInt8] {
        var body: [UInt8] = []
        body.reserveCapacity(askPrefix.count + askMiddle.count + askSuffix.count + 72)
        appendAsk(family: family, number: number, to: &body)
        return body
    }

    /// Appends the body of the ask for question `number` of `family`.
    func appendAsk(family: Int, number: Int, to out: inout [UInt8]) {
        withID(family: family, number: number) { id in
            out += askPrefix
            out.append(contentsOf: id)
            out += askMiddle
            out.append(contentsOf: id)
            out += askSuffix
        }
    }

    private static let answerStart = Array(#"{"type":"answer","id":""#.utf8), answerMiddle = Array(#"","questionId":""#.utf8)
    private static let answerEnd = Array(#"","choice":"approve"}"#.utf8), ackStart = Array(#"{"type":"ack","seq":"#.utf8)

    /// The body of an `approve` answer to the question whose id is `id` (also the request id).
    static func answer(id: [UInt8]) -> [UInt8] {
        var answer: [UInt8] = []
        answer.reserveCapacity(160)
        id.withUnsafeBufferPointer { appendAnswer(id: $0, to: &answer) }
        return answer
    }

    /// Appends the body of an `approve` answer to the question whose id is `id`.
    static func appendAnswer(id: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        out += answerStart
        out.append(contentsOf: id)
        out += answerMiddle
        out.append(contentsOf: id)
        out += answerEnd
    }

    /// The body of an ack up to `seq`.
    static func ack(_ seq: Int) -> [UInt8] {
        var ack: [UInt8] = []
        appendAck(seq, to: &ack)
        return ack
    }

    /// Appends the body of an ack up to `seq` (not negative).
    static func appendAck(_ seq: Int, to out: inout [UInt8]) {
        out += ackStart
        var divisor = 1
        while divisor <= seq / 10 { divisor *= 10 }
        while divisor > 0 {
            out.append(UInt8(48 + seq / divisor % 10))
            divisor /= 10
        }
        out.append(UInt8(ascii: "}"))
    }

    /// `FFFFFFFF-RRRR-4RRR-8000-NNNNNNNNNNNN`: the family, the run and the question's number
    /// in hex.
    func appendID(family: Int, number: Int, to out: inout [UInt8]) {
        withID(family: family, number: number) { out.append(contentsOf: $0) }
    }

    /// Calls `body` with the id `appendID` writes, put together on the stack: appended a
    /// byte at a time, it took a sixth of the load generator's instructions per cycle.
    private func withID<R>(family: Int, number: Int, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 36) { id in
            let p = id.baseAddress!
            Self.writeHex(family, digits: 8, at: p)
            p[8] = UInt8(ascii: "-")
            Self.writeHex(run >> 12, digits: 4, at: p + 9)
            p[13] = UInt8(ascii: "-")
            p[14] = UInt8(ascii: "4")
            Self.writeHex(run, digits: 3, at: p + 15)
            let variant: StaticString = "-8000-"
            (p + 18).initialize(from: variant.utf8Start, count: 6)
            Self.writeHex(number, digits: 12, at: p + 24)
            return body(UnsafeBufferPointer(id))
        }
    }

    /// The lowest `digits` hex digits of `v`, uppercase, most significant first.
    private static func writeHex(_ v: Int, digits: Int, at p: UnsafeMutablePointer<UInt8>) {
        var v = v
        for k in stride(from: digits - 1, through: 0, by: -1) {
            let nibble = UInt8(v & 0xF)
            p[k] = nibble < 10 ? 48 + nibble : 55 + nibble
            v >>= 4
        }
    }

    /// The question number in an id `appendID` wrote.
    static func number(inID id: UnsafeBufferPointer<UInt8>) -> Int? {
        var v = 0
        for c in id.suffix(12) {
            switch c {
            case 48...57: v = v << 4 | Int(c - 48)
            case 65...70: v = v << 4 | Int(c - 55)
            default: return nil
            }
        }
        return v
    }

    /// What the load generator reads of a frame before anything else: its type, and the
    /// `seq` that comes right after it in an event. Read once: searching for each type the
    /// frame might have, one after another, cost about a sixth of the generator's
    /// instructions per cycle. It points into the frame, so it lasts only as long as the
    /// frame's bytes do.
    struct Head {
        private let body: UnsafeBufferPointer<UInt8>
        private let type: Range<Int>
        let seq: Int?
        /// Where the type's value ends: what the frame says of its question comes after.
        var end: Int { type.upperBound }

        private static let typeField: StaticString = #""type":""#

        /// Nil for a frame without a type near its start.
        init?(_ body: UnsafeBufferPointer<UInt8>) {
            guard let t = find(Self.typeField, in: body, within: 24) else { return nil }
            let start = t + Self.typeField.utf8CodeUnitCount
            guard let close = body[start...].firstIndex(of: UInt8(ascii: "\"")) else { return nil }
            self.body = body
            type = start..<close
            seq = BenchFrames.seq(in: body, after: close)
        }

        /// Whether the frame's type is `name`.
        func `is`(_ name: StaticString) -> Bool {
            type.count == name.utf8CodeUnitCount && memcmp(body.baseAddress! + type.lowerBound, name.utf8Start, type.count) == 0
        }
    }

    private static let seqField: StaticString = #""seq":"#

    /// The `seq` of an event, which comes within 24 bytes after `start` (where its type
    /// ends), or nil.
    private static func seq(in bytes: UnsafeBufferPointer<UInt8>, after start: Int) -> Int? {
        guard let seqAt = find(seqField, in: bytes, from: start, within: start + 24) else { return nil }
        var v = 0
        var i = seqAt + seqField.utf8CodeUnitCount
        while i < bytes.count, bytes[i] >= 48, bytes[i] <= 57 {
            v = v * 10 + Int(bytes[i] - 48)
            i += 1
        }
        return v
    }
}
