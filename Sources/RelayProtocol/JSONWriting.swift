// Writing JSON objects straight into bytes, for what the relay encodes most (questions,
// events, outcomes): the same bytes `JSONObject.encode` gives for the same fields,
// without building the values first.

extension String {
    /// Calls `body` with the string's UTF-8 bytes: in place where they are contiguous (a
    /// native string's always are), without the copy `withUTF8` needs, which retains and
    /// releases the string's storage, an atomic operation each, for every string written.
    @inlinable public func withUTF8Bytes<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        if let r = try utf8.withContiguousStorageIfAvailable(body) { return r }
        var s = self
        return try s.withUTF8(body)
    }
}

extension Array where Element == UInt8 {
    /// Appends the bytes of a literal (appending a string's `utf8` view goes through a
    /// generic path that costs several times this copy).
    public mutating func append(literal: StaticString) {
        append(contentsOf: UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }

    /// Appends other bytes in one copy, without the retain and release of the generic
    /// `append(contentsOf:)`.
    @inlinable public mutating func append(bytes: [UInt8]) {
        bytes.withUnsafeBufferPointer { append(contentsOf: $0) }
    }

    @inlinable public mutating func append(bytes: ArraySlice<UInt8>) {
        bytes.withUnsafeBufferPointer { append(contentsOf: $0) }
    }

    /// Appends a string's UTF-8 bytes in one copy.
    public mutating func append(utf8 s: String) {
        s.withUTF8Bytes { append(contentsOf: $0) }
    }

    /// Appends `"key":`, after a comma unless it is the first field (the bytes are empty or
    /// end with the object's `{`). `key` must need no escaping. Written in one append: each
    /// append checks the array's uniqueness and capacity again.
    public mutating func appendJSONKey(_ key: StaticString) { appendInOne(key: key, nil) }

    public mutating func appendJSONField(_ key: StaticString, _ value: String) {
        guard !value.withUTF8Bytes({ appendPlainString(keyBytes: Self.bytes(of: key), $0) }) else { return }
        appendJSONKey(key)
        JSON.encodeString(value, into: &self)
    }

    /// The longest value written together with its key (or its quotes) in one append.
    static var shortValue: Int { 64 }

    /// `"key":"value"` (or `"value"` alone) in one append when the value is short and needs
    /// no escaping, as most are (ids, names, choices); false if nothing was written. The key
    /// must need no escaping.
    @inline(__always) mutating func appendPlainString(keyBytes key: UnsafeBufferPointer<UInt8>?, _ value: UnsafeBufferPointer<UInt8>)
        -> Bool
    {
        guard value.count <= Self.shortValue, !JSON.needsEscaping(value) else { return false }
        appendInOne(keyBytes: key, value, quoted: true)
        return true
    }

    @inline(__always) private static func bytes(of s: StaticString) -> UnsafeBufferPointer<UInt8> {
        UnsafeBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount)
    }

    /// `"key":` as `appendJSONKey` writes it (if there is a key), then `value` if there is
    /// one (in quotes if `quoted`; it must need no escaping), in one append.
    @inline(__always) mutating func appendInOne(key: StaticString?, _ value: UnsafeBufferPointer<UInt8>?, quoted: Bool = false) {
        appendInOne(keyBytes: key.map(Self.bytes(of:)), value, quoted: quoted)
    }

    /// The same, with the key given as bytes (it must need no escaping).
    @inline(__always) mutating func appendInOne(
        keyBytes key: UnsafeBufferPointer<UInt8>?, _ value: UnsafeBufferPointer<UInt8>?, quoted: Bool = false
    ) {
        let comma = key != nil && (last.map { $0 != UInt8(ascii: "{") } ?? false)
        let n = key?.count ?? 0
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: n + 6 + (value?.count ?? 0)) { buf in
            var at = 0
            func put(_ c: UInt8) {
                buf[at] = c
                at += 1
            }
            func put(_ p: UnsafePointer<UInt8>?, _ count: Int) {
                if let p, count > 0 { (buf.baseAddress! + at).initialize(from: p, count: count) }
                at += count
            }
            if let key {
                if comma { put(UInt8(ascii: ",")) }
                put(UInt8(ascii: "\""))
                put(key.baseAddress, n)
                put(UInt8(ascii: "\""))
                put(UInt8(ascii: ":"))
            }
            if let value {
                if quoted { put(UInt8(ascii: "\"")) }
                put(value.baseAddress, value.count)
                if quoted { put(UInt8(ascii: "\"")) }
            }
            append(contentsOf: UnsafeBufferPointer(rebasing: buf[..<at]))
        }
    }

    /// `"key":"value"` for a value known when the relay is built (a name needing no escaping).
    public mutating func appendJSONField(_ key: StaticString, name value: StaticString) {
        appendInOne(key: key, Self.bytes(of: value), quoted: true)
    }

    /// `{"type":"<type>","seq":<seq>`, how every event's frame starts, in one append.
    public mutating func appendEventHead(type: StaticString, seq: Int64) {
        let open = Self.bytes(of: #"{"type":""#)
        let name = Self.bytes(of: type)
        let middle = Self.bytes(of: #"","seq":"#)
        Self.withDecimal(seq) { digits in
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: open.count + name.count + middle.count + digits.count) { buf in
                var at = 0
                func put(_ part: UnsafeBufferPointer<UInt8>) {
                    if let p = part.baseAddress, part.count > 0 { (buf.baseAddress! + at).initialize(from: p, count: part.count) }
                    at += part.count
                }
                put(open)
                put(name)
                put(middle)
                put(digits)
                append(contentsOf: UnsafeBufferPointer(buf))
            }
        }
    }

    public mutating func appendJSONField(_ key: StaticString, _ value: Int64) {
        Self.withDecimal(value) { appendInOne(key: key, $0) }
    }

    /// A time, as its RFC 3339 string.
    public mutating func appendJSONField(_ key: StaticString, _ value: Timestamp) {
        value.withRFC3339 { appendInOne(key: key, $0, quoted: true) }
    }

    /// `value` in decimal, as `String(value)` writes it.
    public mutating func appendJSONInteger(_ value: Int64) {
        Self.withDecimal(value) { append(contentsOf: $0) }
    }

    /// Calls `body` with `value` in decimal, as `String(value)` writes it.
    private static func withDecimal<R>(_ value: Int64, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // a sign and up to 19 digits, in 24 bytes
        var count = 0
        return Swift.withUnsafeMutableBytes(of: &digits) { raw in
            let buf = raw.bindMemory(to: UInt8.self)
            repeat {
                buf[23 - count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            if value < 0 {
                count += 1
                buf[24 - count] = UInt8(ascii: "-")
            }
            return body(UnsafeBufferPointer(rebasing: buf[(24 - count)...]))
        }
    }
}
