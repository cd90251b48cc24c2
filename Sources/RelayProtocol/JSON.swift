// A JSON value with ordered object fields, a strict parser and a compact encoder.
// Purpose-built for the relay's frames: it distinguishes integers from doubles and
// booleans (Foundation's JSONSerialization folds them into NSNumber), bounds nesting
// depth so a hostile frame cannot exhaust the stack, and rejects invalid UTF-8.

/// A JSON value. Objects keep their fields in order.
public enum JSON: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSON])
    case object(JSONObject)
}

/// A JSON object: fields in insertion order; lookups take the last duplicate, as most parsers do.
public struct JSONObject: Sendable, Equatable, ExpressibleByDictionaryLiteral {
    /// One field. A struct, not a tuple: arrays of tuples are copied and destroyed through
    /// the runtime's generic tuple witnesses, which showed in every frame's cost.
    public struct Field: Sendable, Equatable {
        public var key: String
        public var value: JSON

        public init(_ key: String, _ value: JSON) {
            self.key = key
            self.value = value
        }
    }

    public private(set) var fields: [Field]

    public init() { fields = [] }
    public init(_ fields: [Field]) { self.fields = fields }
    public init(dictionaryLiteral elements: (String, JSON)...) {
        fields = elements.map { Field($0.0, $0.1) }
    }

    /// The value of `key`, or nil. Setting nil removes the field.
    public subscript(key: String) -> JSON? {
        get {
            // Lengths first: they are stored, and most keys passed over differ in length.
            let n = key.utf8.count
            for i in fields.indices.reversed() where fields[i].key.utf8.count == n && fields[i].key == key {
                return fields[i].value
            }
            return nil
        }
        set {
            if let newValue {
                if let i = fields.lastIndex(where: { $0.key == key }) {
                    fields[i].value = newValue
                } else {
                    fields.append(Field(key, newValue))
                }
            } else {
                fields.removeAll { $0.key == key }
            }
        }
    }

    public static func == (a: JSONObject, b: JSONObject) -> Bool {
        a.fields == b.fields
    }
}

extension JSON: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSON...) { self = .array(elements) }
    public init(nilLiteral: ()) { self = .null }
}

extension JSON {
    public subscript(key: String) -> JSON? {
        if case .object(let o) = self { return o[key] }
        return nil
    }
    public var string: String? {
        if case .string(let s) = self { return s }
        return nil
    }
    public var bool: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }
    /// An integer, also from a double with no fractional part.
    public var int: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d) where d.rounded() == d && abs(d) < 9.0e18: return Int64(d)
        default: return nil
        }
    }
    /// A whole number, one past Int64's range held at its end (a count or a time that
    /// large means "more than any").
    public var wholeNumber: Int64? {
        if let i = int { return i }
        guard let d = number, d.rounded() == d else { return nil }
        return d > 0 ? .max : .min
    }
    /// A finite number (one beyond a double's range, read as infinite, is none).
    public var number: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d) where d.isFinite: return d
        default: return nil
        }
    }
    public var object: JSONObject? {
        if case .object(let o) = self { return o }
        return nil
    }
    public var array: [JSON]? {
        if case .array(let a) = self { return a }
        return nil
    }
}

// MARK: - Parsing

/// Why bytes are not a JSON document, or not one `JSON.parse` takes: when `isJSON`, what
/// stopped it is JSON all the same, and `JSON.parseLeniently` reads the document (or says
/// why it is not JSON).
public struct JSONParseError: Error, Sendable, CustomStringConvertible {
    public let reason: String
    public let offset: Int
    /// An array or object nested deeper than `JSON.maxDepth`.
    public var tooDeep = false
    /// A `\u` escape of half a UTF-16 surrogate pair without its other half: JSON's grammar
    /// allows it, but no Unicode text (nor UTF-8) holds it.
    public var unpairedSurrogate = false
    public var isJSON: Bool { tooDeep || unpairedSurrogate }
    public var description: String { "\(reason) at byte \(offset)" }
}

extension JSON {
    /// The deepest nesting of arrays and objects accepted.
    public static let maxDepth = 64

    /// Parses one JSON document; whitespace around it is allowed, anything else is an error.
    public static func parse<C: Collection<UInt8>>(_ bytes: C) throws(JSONParseError) -> JSON {
        let result: Result<JSON, JSONParseError>? = bytes.withContiguousStorageIfAvailable { buf in
            var p = Parser(buf)
            return Result { () throws(JSONParseError) in try p.document() }
        }
        if let result { return try result.get() }
        let copy = Array(bytes)
        return try copy.withUnsafeBufferPointer { buf throws(JSONParseError) in
            var p = Parser(buf)
            return try p.document()
        }
    }

    /// Parses one JSON document from an array (the common case, without generic dispatch).
    public static func parse(_ bytes: [UInt8]) throws(JSONParseError) -> JSON {
        try bytes.withUnsafeBufferPointer { buf throws(JSONParseError) in
            var p = Parser(buf)
            return try p.document()
        }
    }

    /// Parses a Swift string as JSON.
    public static func parse(_ text: String) throws(JSONParseError) -> JSON {
        try parse(Array(text.utf8))
    }

    /// Parses as `parse` does, except what is JSON but refused there (`JSONParseError.isJSON`):
    /// an unpaired surrogate escape is read as U+FFFD (`replaced` says whether one was), and
    /// an array or object nested deeper than `maxDepth` is checked without recursion and read
    /// as null (`truncated`): what a frame too deep says of itself (its id, for the error's
    /// `re`) is read so.
    public static func parseLeniently(_ bytes: UnsafeBufferPointer<UInt8>) throws(JSONParseError) -> (
        json: JSON, truncated: Bool, replaced: Bool
    ) {
        var p = Parser(bytes)
        p.lenient = true
        let json = try p.document()
        return (json, p.truncated, p.replaced)
    }
}

extension UnsafeBufferPointer<UInt8> {
    /// The index of the first byte at or after `i` that is not JSON whitespace.
    @inline(__always) func jsonSpaceEnd(from i: Int) -> Int {
        var i = i
        while i < count {
            switch self[i] {
            case 0x20, 0x09, 0x0A, 0x0D: i += 1
            default: return i
            }
        }
        return i
    }
}

private struct Parser {
    let buf: UnsafeBufferPointer<UInt8>
    var i = 0
    var depth = 0
    /// Whether an array or object past `JSON.maxDepth` is skipped (and read as null), and an
    /// unpaired surrogate read as U+FFFD, rather than refused; `truncated` and `replaced`
    /// record that one was.
    var lenient = false
    var truncated = false
    var replaced = false

    init(_ buf: UnsafeBufferPointer<UInt8>) { self.buf = buf }

    func fail(_ reason: String) -> JSONParseError { JSONParseError(reason: reason, offset: i) }

    mutating func document() throws(JSONParseError) -> JSON {
        skipSpace()
        let v = try value()
        skipSpace()
        guard i == buf.count else { throw fail("unexpected data after the JSON value") }
        return v
    }

    mutating func skipSpace() { i = buf.jsonSpaceEnd(from: i) }

    mutating func value() throws(JSONParseError) -> JSON {
        guard i < buf.count else { throw fail("unexpected end of input") }
        switch buf[i] {
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            if lenient && depth >= JSON.maxDepth {
                try skipNested()
                truncated = true
                return .null
            }
            return buf[i] == UInt8(ascii: "{") ? try object() : try array()
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw fail("unexpected character")
        }
    }

    mutating func literal(_ word: StaticString) throws(JSONParseError) {
        let n = word.utf8CodeUnitCount
        guard i + n <= buf.count else { throw fail("unexpected end of input") }
        let w = word.utf8Start
        for k in 0..<n where buf[i + k] != w[k] { throw fail("invalid literal") }
        i += n
    }

    mutating func enter() throws(JSONParseError) {
        depth += 1
        if depth > JSON.maxDepth {
            var error = fail("nesting deeper than \(JSON.maxDepth)")
            error.tooDeep = true
            throw error
        }
    }

    /// Skips the array or object at `i`, however deep, checking that it is JSON: a loop
    /// with the closing brackets still owed, not recursion (a hostile frame can nest as
    /// deep as it is long).
    mutating func skipNested() throws(JSONParseError) {
        var owed: [UInt8] = []
        repeat {
            skipSpace()  // at a value
            guard i < buf.count else { throw fail("unexpected end of input") }
            switch buf[i] {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                let close = buf[i] == UInt8(ascii: "{") ? UInt8(ascii: "}") : UInt8(ascii: "]")
                i += 1
                skipSpace()
                if i < buf.count, buf[i] == close {
                    i += 1
                } else {
                    owed.append(close)
                    if close == UInt8(ascii: "}") { try fieldName() }
                    continue
                }
            case UInt8(ascii: "\""): _ = try string()
            case UInt8(ascii: "t"): try literal("true")
            case UInt8(ascii: "f"): try literal("false")
            case UInt8(ascii: "n"): try literal("null")
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): _ = try number()
            default: throw fail("unexpected character")
            }
            // After a value: close what it ends, or go on to the next item.
            while let close = owed.last {
                skipSpace()
                guard i < buf.count else { throw fail("unexpected end of input") }
                if buf[i] == UInt8(ascii: ",") {
                    i += 1
                    if close == UInt8(ascii: "}") { try fieldName() }
                    break
                }
                guard buf[i] == close else { throw fail("expected ',' or '\(Character(Unicode.Scalar(close)))'") }
                i += 1
                owed.removeLast()
            }
        } while !owed.isEmpty
    }

    /// Reads `"name":` (and the space before it); returns the name.
    @discardableResult
    mutating func fieldName() throws(JSONParseError) -> String {
        skipSpace()
        guard i < buf.count, buf[i] == UInt8(ascii: "\"") else { throw fail("expected a field name") }
        let name = try string()
        skipSpace()
        guard i < buf.count, buf[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
        i += 1
        return name
    }

    mutating func object() throws(JSONParseError) -> JSON {
        try enter()
        i += 1
        var fields: [JSONObject.Field] = []
        skipSpace()
        if i < buf.count, buf[i] == UInt8(ascii: "}") {
            i += 1
            depth -= 1
            return .object(JSONObject(fields))
        }
        fields.reserveCapacity(8)  // not for `{}`: a frame of them would take 45 times its size
        while true {
            let key = try fieldName()
            skipSpace()
            fields.append(JSONObject.Field(key, try value()))
            skipSpace()
            guard i < buf.count else { throw fail("unexpected end of input") }
            if buf[i] == UInt8(ascii: ",") {
                i += 1
                continue
            }
            guard buf[i] == UInt8(ascii: "}") else { throw fail("expected ',' or '}'") }
            i += 1
            depth -= 1
            return .object(JSONObject(fields))
        }
    }

    mutating func array() throws(JSONParseError) -> JSON {
        try enter()
        i += 1
        var items: [JSON] = []
        skipSpace()
        if i < buf.count, buf[i] == UInt8(ascii: "]") {
            i += 1
            depth -= 1
            return .array(items)
        }
        items.reserveCapacity(4)  // one allocation for the short lists frames hold, not three
        while true {
            skipSpace()
            items.append(try value())
            skipSpace()
            guard i < buf.count else { throw fail("unexpected end of input") }
            if buf[i] == UInt8(ascii: ",") {
                i += 1
                continue
            }
            guard buf[i] == UInt8(ascii: "]") else { throw fail("expected ',' or ']'") }
            i += 1
            depth -= 1
            return .array(items)
        }
    }

    mutating func string() throws(JSONParseError) -> String {
        i += 1
        let start = i
        var highBits: UInt64 = 0
        // Fast path: no escapes.
        while i < buf.count {
            // Eight bytes at a time up to the first that ends or escapes the string.
            if i + 8 <= buf.count {
                let x = UnsafeRawPointer(buf.baseAddress! + i).loadUnaligned(as: UInt64.self)
                let special = JSON.quoteBackslashOrControl(x)
                guard special != 0 else {
                    highBits |= x
                    i += 8
                    continue
                }
                let plain = special.trailingZeroBitCount / 8
                highBits |= x & ((1 << UInt64(8 * plain)) &- 1)
                i += plain
            }
            let c = buf[i]
            if c == UInt8(ascii: "\"") {
                let bytes = UnsafeBufferPointer(rebasing: buf[start..<i])
                i += 1
                // ASCII is valid UTF-8 as it stands; String(validating:) is generic at run time
                // and cost more than the rest of a frame's parse together.
                if highBits & 0x8080_8080_8080_8080 == 0 {
                    return JSONWords.lookup(buf.baseAddress! + start, count: bytes.count, readable: buf.count - start)
                        ?? String(decoding: bytes, as: UTF8.self)
                }
                guard let s = String(validating: bytes, as: UTF8.self) else {
                    throw JSONParseError(reason: "invalid UTF-8 in a string", offset: start)
                }
                return s
            }
            highBits |= UInt64(c)
            if c == UInt8(ascii: "\\") { break }
            if c < 0x20 { throw fail("control character in a string") }
            i += 1
        }
        var out = Array(buf[start..<i])
        while i < buf.count {
            let c = buf[i]
            switch c {
            case UInt8(ascii: "\""):
                i += 1
                guard let s = String(validating: out, as: UTF8.self) else {
                    throw JSONParseError(reason: "invalid UTF-8 in a string", offset: start)
                }
                return s
            case UInt8(ascii: "\\"):
                i += 1
                guard i < buf.count else { throw fail("unexpected end of input") }
                let e = buf[i]
                i += 1
                switch e {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"): out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    let at = i - 2
                    var scalar = try hex4()
                    if (0xD800..<0xDC00).contains(scalar) {
                        let next = i
                        var low: UInt32 = 0
                        if i + 1 < buf.count, buf[i] == UInt8(ascii: "\\"), buf[i + 1] == UInt8(ascii: "u") {
                            i += 2
                            low = try hex4()
                        }
                        if (0xDC00..<0xE000).contains(low) {
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else {
                            i = next  // an escape after it is read on its own
                            scalar = try unpaired(at: at)
                        }
                    } else if (0xDC00..<0xE000).contains(scalar) {
                        scalar = try unpaired(at: at)
                    }
                    out.append(contentsOf: Unicode.UTF8.encode(Unicode.Scalar(scalar)!)!)
                default: throw fail("invalid escape")
                }
            default:
                if c < 0x20 { throw fail("control character in a string") }
                out.append(c)
                i += 1
            }
        }
        throw fail("unterminated string")
    }

    /// The unpaired surrogate escape at `at`: read as U+FFFD when lenient, else refused as
    /// JSON that `parse` does not take.
    mutating func unpaired(at: Int) throws(JSONParseError) -> UInt32 {
        guard lenient else {
            let escape = String(decoding: UnsafeBufferPointer(rebasing: buf[at..<(at + 6)]), as: UTF8.self)
            var error = JSONParseError(reason: "an unpaired UTF-16 surrogate escape (\(escape))", offset: at)
            error.unpairedSurrogate = true
            throw error
        }
        replaced = true
        return 0xFFFD
    }

    mutating func hex4() throws(JSONParseError) -> UInt32 {
        guard i + 4 <= buf.count else { throw fail("unexpected end of input") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = buf[i]
            let d: UInt32
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
            default: throw fail("invalid \\u escape")
            }
            v = v << 4 | d
            i += 1
        }
        return v
    }

    mutating func digits() -> Int {
        let s = i
        while i < buf.count, buf[i] >= UInt8(ascii: "0"), buf[i] <= UInt8(ascii: "9") { i += 1 }
        return i - s
    }

    mutating func number() throws(JSONParseError) -> JSON {
        let start = i
        if buf[i] == UInt8(ascii: "-") { i += 1 }
        guard i < buf.count else { throw fail("unexpected end of input") }
        if buf[i] == UInt8(ascii: "0") {
            i += 1
        } else if digits() == 0 {
            throw fail("invalid number")
        }
        var integral = true
        if i < buf.count, buf[i] == UInt8(ascii: ".") {
            i += 1
            integral = false
            guard digits() > 0 else { throw fail("invalid number") }
        }
        if i < buf.count, buf[i] == UInt8(ascii: "e") || buf[i] == UInt8(ascii: "E") {
            i += 1
            integral = false
            if i < buf.count, buf[i] == UInt8(ascii: "+") || buf[i] == UInt8(ascii: "-") { i += 1 }
            guard digits() > 0 else { throw fail("invalid number") }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: buf[start..<i]), as: UTF8.self)
        if integral, let v = Int64(text) { return .int(v) }
        // A number beyond a double's range is still JSON: it reads as infinite (as JavaScript
        // and Python read it), so a frame holding one is answered like any other — an unknown
        // field ignored, a known one the wrong type. Encoding writes it as null.
        guard let d = Double(text) else { throw JSONParseError(reason: "invalid number", offset: start) }
        return .double(d)
    }
}

// MARK: - Encoding

extension JSON {
    /// Appends the compact encoding of this value to `out`.
    public func encode(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(literal: "null")
        case .bool(let b): out.append(literal: b ? "true" : "false")
        case .int(let v): out.appendJSONInteger(v)
        case .double(let d):
            if !d.isFinite {
                out.append(literal: "null")  // JSON has no NaN or infinity
            } else if d.rounded() == d && abs(d) < 1e15 {
                out.append(contentsOf: String(Int64(d)).utf8)
            } else {
                out.append(contentsOf: "\(d)".utf8)
            }
        case .string(let s): JSON.encodeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (k, item) in items.enumerated() {
                if k > 0 { out.append(UInt8(ascii: ",")) }
                item.encode(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let o): o.encode(into: &out)
        }
    }

    /// The compact encoding as bytes.
    public var encoded: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128)
        encode(into: &out)
        return out
    }

    /// The compact encoding as a string.
    public var text: String { String(decoding: encoded, as: UTF8.self) }

    static func encodeString(_ s: String, into out: inout [UInt8]) {
        s.withUTF8Bytes { bytes in
            if out.appendPlainString(keyBytes: nil, bytes) { return }
            guard needsEscaping(bytes) else {
                out.append(UInt8(ascii: "\""))
                out.append(contentsOf: bytes)
                out.append(UInt8(ascii: "\""))
                return
            }
            out.append(UInt8(ascii: "\""))
            // Runs that need no escaping are copied whole.
            var runStart = 0
            for (i, c) in bytes.enumerated() where c < 0x20 || c == UInt8(ascii: "\"") || c == UInt8(ascii: "\\") {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<i]))
                runStart = i + 1
                switch c {
                case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
                case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
                case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
                // As short as any escape a client may send: what is written never outgrows what was read.
                case 0x08: out.append(contentsOf: [0x5C, UInt8(ascii: "b")])
                case 0x0C: out.append(contentsOf: [0x5C, UInt8(ascii: "f")])
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): out.append(contentsOf: [0x5C, c])
                default:
                    let hex = Array("0123456789abcdef".utf8)
                    out.append(contentsOf: [
                        0x5C, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(c >> 4)], hex[Int(c & 0xF)],
                    ])
                }
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...]))
            out.append(UInt8(ascii: "\""))
        }
    }

    /// The eight bytes in `x` (little-endian) that are a control character, a quote or a
    /// backslash, as the top bit of each; zero if none is. Exact up to the first such byte
    /// (above it a borrow may mark others), which is all a scan needs.
    /// (`(v - 0x01…) & ~v & 0x80…` marks the zero bytes of v.)
    static func quoteBackslashOrControl(_ x: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let quote = x ^ (ones &* 0x22)
        let backslash = x ^ (ones &* 0x5C)
        let control = (x &- ones &* 0x20) & ~x
        return (control | ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash)) & (ones &* 0x80)
    }

    /// Whether any byte is a control character, a quote or a backslash; eight bytes at a
    /// time, since nearly every string needs no escaping and this check is the encoder's
    /// main cost.
    static func needsEscaping(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = bytes.baseAddress else { return false }
        var i = 0
        while i + 8 <= bytes.count {
            if quoteBackslashOrControl(UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self)) != 0 { return true }
            i += 8
        }
        while i < bytes.count {
            let c = bytes[i]
            if c < 0x20 || c == UInt8(ascii: "\"") || c == UInt8(ascii: "\\") { return true }
            i += 1
        }
        return false
    }
}

extension JSONObject {
    /// Appends the compact encoding of this object to `out`.
    public func encode(into out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        for (k, field) in fields.enumerated() {
            if case .string(let value) = field.value, Self.appendShortStringField(field.key, value, into: &out) { continue }
            if k > 0 { out.append(UInt8(ascii: ",")) }
            JSON.encodeString(field.key, into: &out)
            out.append(UInt8(ascii: ":"))
            field.value.encode(into: &out)
        }
        out.append(UInt8(ascii: "}"))
    }

    /// Writes `"key":"value"` (after a comma unless first) in one append when both are
    /// short and need no escaping; false if it wrote nothing.
    private static func appendShortStringField(_ key: String, _ value: String, into out: inout [UInt8]) -> Bool {
        key.withUTF8Bytes { k in
            guard k.count <= [UInt8].shortValue, !JSON.needsEscaping(k) else { return false }
            return value.withUTF8Bytes { out.appendPlainString(keyBytes: k, $0) }
        }
    }

    public var encoded: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        encode(into: &out)
        return out
    }
}

/// The protocol's field names and common values, made once: a parsed string that is one
/// of them is taken from here instead of being built again (making a string from bytes
/// costs several times this lookup, and every frame repeats them).
enum JSONWords {
    /// An open-addressed hash table of words up to 24 bytes, each held as its length and
    /// three little-endian, zero-padded 8-byte chunks; a lookup hashes the chunks and
    /// compares about one slot.
    private struct Table: @unchecked Sendable {
        /// Four words per slot: length (0 for an empty slot), then the three chunks.
        let slots: UnsafeMutablePointer<UInt64>
        let strings: UnsafeMutablePointer<String>
    }

    private static let maxLength = 24
    private static let slotBits: UInt64 = 8
    private static let mask = (1 << Int(slotBits)) - 1

    private static let table: Table = {
        let words = [
            // Frames and requests.
            "type", "id", "re", "seq", "ack", "ok", "error", "code", "message", "ask", "answer", "cancel", "hello",
            "welcome", "protocol", "member", "token", "session", "resume", "subscribe", "topics", "questionId",
            "choice", "status", "attempt", "child", "family", "role", "ping", "pong", "pending", "history", "limit",
            "handles", "knownHandles", "question", "response", "questionClosed", "reason", "by", "cursor", "head",
            "gap", "enabled", "createdAt", "outcome", "guardian", "answeredAt", "questions",
            // Questions.
            "topic", "kind", "communication", "significantAppUpdate", "description", "personInformation", "handle",
            "value", "phoneNumber", "emailAddress", "custom", "nameComponents", "givenName", "familyName",
            "middleName", "nickname", "namePrefix", "nameSuffix", "avatarImage", "actions", "audioCall",
            "videoCall", "communicate", "choices", "title", "approval", "denial", "durationSeconds",
            "defaultChoice", "expirationDate", "approve", "decline", "answered", "cancelled", "expired",
        ]
        let slots = UnsafeMutablePointer<UInt64>.allocate(capacity: 4 * (mask + 1))
        slots.initialize(repeating: 0, count: 4 * (mask + 1))
        let strings = UnsafeMutablePointer<String>.allocate(capacity: mask + 1)
        strings.initialize(repeating: "", count: mask + 1)
        let unique = Set(words)
        precondition(unique.count * 3 < mask, "the table must stay at most a third full")
        for w in unique {
            let b = Array(w.utf8)
            precondition(b.count <= maxLength)
            let c = b.withUnsafeBufferPointer { p in (0..<3).map { chunk(p.baseAddress! + 8 * $0, b.count - 8 * $0, readable: 0) } }
            var k = slot(c[0], c[1], c[2])
            while slots[4 * k] != 0 { k = (k + 1) & mask }
            slots[4 * k] = UInt64(b.count)
            for j in 0..<3 { slots[4 * k + 1 + j] = c[j] }
            strings[k] = w
        }
        return Table(slots: slots, strings: strings)
    }()

    @inline(__always)
    private static func slot(_ c0: UInt64, _ c1: UInt64, _ c2: UInt64) -> Int {
        Int(truncatingIfNeeded: ((c0 ^ (c1 &* 0x9E37_79B9_7F4A_7C15) ^ (c2 >> 3)) &* 0xFF51_AFD7_ED55_8CCD) >> (64 - slotBits))
    }

    /// Eight bytes from `p` as one word, of which only the first `n` (up to eight) count;
    /// `readable` says how many bytes may be read from `p`.
    @inline(__always)
    private static func chunk(_ p: UnsafePointer<UInt8>, _ n: Int, readable: Int) -> UInt64 {
        if n <= 0 { return 0 }
        if readable >= 8 {
            let v = UnsafeRawPointer(p).loadUnaligned(as: UInt64.self)
            return n >= 8 ? v : v & ((1 << UInt64(8 * n)) &- 1)
        }
        var v: UInt64 = 0
        for j in 0..<min(n, 8) { v |= UInt64(p[j]) << (8 * UInt64(j)) }
        return v
    }

    /// The stored string equal to the `count` bytes at `p`, or nil; `readable` (at least
    /// `count`) says how many bytes may be read from `p`, so that short words load whole.
    static func lookup(_ p: UnsafePointer<UInt8>, count: Int, readable: Int) -> String? {
        guard count > 0 && count <= maxLength else { return nil }
        let c0 = chunk(p, count, readable: readable)
        let c1 = chunk(p + 8, count - 8, readable: readable - 8)
        let c2 = chunk(p + 16, count - 16, readable: readable - 16)
        let t = table
        var k = slot(c0, c1, c2)
        while true {
            let s = t.slots + 4 * k
            if s[0] == 0 { return nil }
            if s[0] == UInt64(count) && s[1] == c0 && s[2] == c1 && s[3] == c2 { return t.strings[k] }
            k = (k + 1) & mask
        }
    }
}
