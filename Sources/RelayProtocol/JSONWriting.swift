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
        appendGathered(capacity: (key?.count ?? 0) + 6 + (value?.count ?? 0), after: last) { g in
            g.putField(key: key, value, quoted: quoted)
        }
    }

    /// Appends what `gather` puts together (at most `capacity` bytes) in one append: each
    /// append checks the array's uniqueness and capacity again. `after` is the byte the
    /// array ends with (for the comma before a field).
    @inline(__always) mutating func appendGathered(capacity: Int, after: UInt8? = nil, _ gather: (inout Gatherer) -> Void) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { buf in
            var g = Gatherer(buf: buf, after: after)
            gather(&g)
            precondition(!g.overflowed, "gathered more than the room computed for it")
            append(contentsOf: UnsafeBufferPointer(rebasing: buf[..<g.count]))
        }
    }

    /// `"key":"<UUID>"`, the id in its canonical form, straight from its bits.
    public mutating func appendJSONField(_ key: StaticString, _ value: QuestionID) {
        value.withCanonicalBytes { appendInOne(key: key, $0, quoted: true) }
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
            appendGathered(capacity: open.count + name.count + middle.count + digits.count) { g in
                g.put(open)
                g.put(name)
                g.put(middle)
                g.put(digits)
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

/// Bytes put together in memory the caller lends (on the stack, mostly), to be appended
/// to an array at once: each append to an array checks its uniqueness and capacity again,
/// where putting here checks only the room left. Past that room nothing more is put and
/// `overflowed` says so.
struct Gatherer {
    let buf: UnsafeMutableBufferPointer<UInt8>
    private(set) var count = 0
    private(set) var overflowed = false
    /// The byte before the first put here (where the gathered bytes will follow it).
    private let before: UInt8?

    init(buf: UnsafeMutableBufferPointer<UInt8>, after before: UInt8? = nil) {
        self.buf = buf
        self.before = before
    }

    /// The last byte put, or the one before them.
    var last: UInt8? { count > 0 ? buf[count - 1] : before }

    @inline(__always) mutating func put(_ c: UInt8) {
        guard count < buf.count else { return overflow() }
        buf[count] = c
        count += 1
    }

    @inline(__always) mutating func put(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let p = bytes.baseAddress, bytes.count > 0 else { return }
        guard buf.count - count >= bytes.count else { return overflow() }
        (buf.baseAddress! + count).initialize(from: p, count: bytes.count)
        count += bytes.count
    }

    @inline(__always) mutating func put(_ literal: StaticString) {
        put(UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }

    /// `"key":` (after a comma unless it is an object's first field: nothing or `{` before
    /// it) if there is a key, then `value` if there is one, in quotes if `quoted`. Neither
    /// may need escaping.
    @inline(__always) mutating func putField(key: UnsafeBufferPointer<UInt8>?, _ value: UnsafeBufferPointer<UInt8>?, quoted: Bool = false) {
        if let key {
            if let l = last, l != UInt8(ascii: "{") { put(UInt8(ascii: ",")) }
            put(UInt8(ascii: "\""))
            put(key)
            put(UInt8(ascii: "\""))
            put(UInt8(ascii: ":"))
        }
        if let value {
            if quoted { put(UInt8(ascii: "\"")) }
            put(value)
            if quoted { put(UInt8(ascii: "\"")) }
        }
    }

    @inline(__always) mutating func putField(_ key: StaticString, _ value: UnsafeBufferPointer<UInt8>, quoted: Bool = false) {
        putField(key: UnsafeBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount), value, quoted: quoted)
    }

    @inline(never) private mutating func overflow() { overflowed = true }
}
