// Writing JSON objects straight into bytes, for what the relay encodes most (questions,
// events, outcomes): the same bytes `JSONObject.encode` gives for the same fields,
// without building the values first.

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
        var s = s
        s.withUTF8 { append(contentsOf: $0) }
    }

    /// Appends `"key":`, after a comma unless it is the first field (the bytes are empty or
    /// end with the object's `{`). `key` must need no escaping.
    public mutating func appendJSONKey(_ key: StaticString) {
        if let last, last != UInt8(ascii: "{") { append(UInt8(ascii: ",")) }
        append(UInt8(ascii: "\""))
        append(literal: key)
        append(UInt8(ascii: "\""))
        append(UInt8(ascii: ":"))
    }

    public mutating func appendJSONField(_ key: StaticString, _ value: String) {
        appendJSONKey(key)
        JSON.encodeString(value, into: &self)
    }

    public mutating func appendJSONField(_ key: StaticString, _ value: Int64) {
        appendJSONKey(key)
        appendJSONInteger(value)
    }

    /// A time, as its RFC 3339 string.
    public mutating func appendJSONField(_ key: StaticString, _ value: Timestamp) {
        appendJSONKey(key)
        append(UInt8(ascii: "\""))
        value.appendRFC3339(to: &self)
        append(UInt8(ascii: "\""))
    }

    /// `value` in decimal, as `String(value)` writes it.
    public mutating func appendJSONInteger(_ value: Int64) {
        if value < 0 { append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // up to 20 digits, as 24 bytes
        var count = 0
        Swift.withUnsafeMutableBytes(of: &digits) { buf in
            repeat {
                buf[23 - count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            append(contentsOf: UnsafeRawBufferPointer(rebasing: buf[(24 - count)...]))
        }
    }
}
