// Reading JSON of a common shape straight from its bytes: objects whose fields are known
// by name, strings of plain ASCII (no escapes, no control characters), small integers.
// A reader gives up (nil, false, or `failed`) on anything else; its callers then parse
// the frame into a tree, which accepts all of JSON and says what is wrong.

import Foundation

struct PlainReader {
    let buf: UnsafeBufferPointer<UInt8>
    var i = 0
    /// Set when the bytes leave the shape read; a loop over fields or elements then ends.
    var failed = false

    init(_ buf: UnsafeBufferPointer<UInt8>) { self.buf = buf }

    /// Which of an object's known fields were read, and the last.
    struct Fields {
        /// Whether the fields must come in the order of their list.
        let ordered: Bool
        var seen: UInt32 = 0
        var last = -1
        var count = 0
    }

    /// The index in `names` of the object's next field (its name and `:` read); nil at the
    /// object's end (its `}` read) or, setting `failed`, at a field not in `names`, read
    /// before or (if ordered) out of order.
    mutating func nextField(of names: [StaticString], _ fields: inout Fields) -> Int? {
        guard let name = nextName(fields.count) else { return nil }
        guard let k = names.firstIndex(where: { Self.equal(name, $0) }), fields.seen & (1 << k) == 0,
            !fields.ordered || k > fields.last
        else {
            failed = true
            return nil
        }
        fields.seen |= 1 << k
        fields.last = k
        fields.count += 1
        return k
    }

    /// The name of an object's next field (its `:` read), after `count` fields; nil at the
    /// object's end (its `}` read) or, setting `failed`, at anything else.
    mutating func nextName(_ count: Int) -> UnsafeBufferPointer<UInt8>? {
        guard another(after: count, closing: UInt8(ascii: "}")) else { return nil }
        guard let name = plainString(), take(UInt8(ascii: ":")) else {
            failed = true
            return nil
        }
        return name
    }

    /// Whether an array has another element after `count` (its `,` read); false at its end
    /// (its `]` read) or, setting `failed`, at anything else.
    mutating func nextElement(_ count: Int) -> Bool { another(after: count, closing: UInt8(ascii: "]")) }

    /// Whether an object or array has another item after `count` (its `,` read); false at
    /// `closing` (read) or, setting `failed`, at anything else.
    private mutating func another(after count: Int, closing: UInt8) -> Bool {
        skipSpace()
        guard i < buf.count else {
            failed = true
            return false
        }
        if buf[i] == closing {
            i += 1
            return false
        }
        guard count == 0 || take(UInt8(ascii: ",")) else {
            failed = true
            return false
        }
        return true
    }

    /// A string of ASCII without control characters or escapes: its bytes between the quotes.
    mutating func plainString() -> UnsafeBufferPointer<UInt8>? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        let start = i
        // Eight bytes at a time up to the first that is not plain (the lowest byte marked is).
        while i + 8 <= buf.count {
            let x = UnsafeRawPointer(buf.baseAddress! + i).loadUnaligned(as: UInt64.self)
            let special = JSON.quoteBackslashOrControl(x) | (x & 0x8080_8080_8080_8080)
            guard special == 0 else {
                i += special.trailingZeroBitCount / 8
                break
            }
            i += 8
        }
        while i < buf.count {
            let c = buf[i]
            i += 1
            if c == UInt8(ascii: "\"") { return UnsafeBufferPointer(rebasing: buf[start..<(i - 1)]) }
            if c < 0x20 || c >= 0x80 || c == UInt8(ascii: "\\") { return nil }
        }
        return nil
    }

    /// A non-negative integer of at most 18 digits as JSON writes it: no sign, no leading
    /// zero, no fraction, no exponent.
    mutating func plainInteger() -> Int64? {
        skipSpace()
        let start = i
        var v: Int64 = 0
        while i < buf.count, i - start < 18, buf[i] >= UInt8(ascii: "0"), buf[i] <= UInt8(ascii: "9") {
            v = v * 10 + Int64(buf[i] - UInt8(ascii: "0"))
            i += 1
        }
        guard i > start, i - start == 1 || buf[start] != UInt8(ascii: "0") else { return nil }
        if i < buf.count {
            switch buf[i] {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"): return nil
            default: break
            }
        }
        return v
    }

    /// Reads `null` if it comes next.
    mutating func takeNull() -> Bool {
        skipSpace()
        guard buf.count - i >= 4, buf[i] == UInt8(ascii: "n"), buf[i + 1] == UInt8(ascii: "u"),
            buf[i + 2] == UInt8(ascii: "l"), buf[i + 3] == UInt8(ascii: "l")
        else { return false }
        i += 4
        return true
    }

    /// Reads `c` if it comes next, after any whitespace.
    mutating func take(_ c: UInt8) -> Bool {
        skipSpace()
        guard i < buf.count, buf[i] == c else { return false }
        i += 1
        return true
    }

    mutating func skipSpace() { i = buf.jsonSpaceEnd(from: i) }

    static func equal(_ bytes: UnsafeBufferPointer<UInt8>, _ word: StaticString) -> Bool {
        bytes.count == word.utf8CodeUnitCount && memcmp(bytes.baseAddress!, word.utf8Start, bytes.count) == 0
    }

    static func equal(_ bytes: UnsafeBufferPointer<UInt8>, _ word: String) -> Bool {
        word.utf8.count == bytes.count
            && (bytes.isEmpty || word.withUTF8Bytes { memcmp($0.baseAddress!, bytes.baseAddress!, bytes.count) == 0 })
    }
}
