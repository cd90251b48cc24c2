// The compact binary form the journal and the event batches are written in: zigzag
// varints and length-prefixed bytes, read back with every length checked.

import RelayProtocol

/// A journal entry could not be read back.
struct JournalError: Error, CustomStringConvertible {
    let description: String
}

/// Appends little-endian varints and length-prefixed bytes, into memory of its own: an
/// append is a capacity check and a copy, where an array's also checks its uniqueness and
/// goes through the generic path of `append(contentsOf:)` (a journal record is dozens of
/// small appends a change, and those checks cost more than the bytes).
struct ByteWriter: ~Copyable {
    private var base: UnsafeMutablePointer<UInt8>
    /// How many bytes are written.
    private(set) var count = 0
    private(set) var capacity: Int

    /// An empty writer with room for `capacity` bytes before it grows.
    init(capacity: Int = 256) {
        self.capacity = max(capacity, 16)
        base = .allocate(capacity: self.capacity)
    }

    /// A writer that starts with `zeros` zero bytes (room for a header filled in later).
    init(zeros: Int) {
        self.init(capacity: max(256, zeros))
        base.initialize(repeating: 0, count: zeros)
        count = zeros
    }

    deinit { base.deallocate() }

    /// The bytes written (valid during the call only).
    func withBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        try body(UnsafeBufferPointer(start: base, count: count))
    }

    /// The same, writable in place (for a header filled in after the bytes behind it).
    mutating func withMutableBytes<R>(_ body: (UnsafeMutableBufferPointer<UInt8>) throws -> R) rethrows -> R {
        try body(UnsafeMutableBufferPointer(start: base, count: count))
    }

    /// A copy of the bytes written.
    var bytes: [UInt8] { withBytes { Array($0) } }

    /// Keeps the first `n` bytes; with `shrinkingAbove`, memory beyond that many bytes is let go.
    mutating func truncate(to n: Int, shrinkingAbove limit: Int = .max) {
        count = min(max(n, 0), count)
        guard capacity > limit else { return }
        let kept = UnsafeMutablePointer<UInt8>.allocate(capacity: max(256, count))
        kept.moveInitialize(from: base, count: count)
        base.deallocate()
        base = kept
        capacity = max(256, count)
    }

    /// Makes room for `n` more bytes.
    @inline(__always) private mutating func reserve(_ n: Int) {
        if capacity - count < n { grow(to: count + n) }
    }

    @inline(never) private mutating func grow(to needed: Int) {
        let bigger = max(needed, 2 * capacity)
        let moved = UnsafeMutablePointer<UInt8>.allocate(capacity: bigger)
        moved.moveInitialize(from: base, count: count)
        base.deallocate()
        base = moved
        capacity = bigger
    }

    mutating func int(_ v: Int64) {
        reserve(10)  // the longest varint of 64 bits
        var u = UInt64(bitPattern: (v << 1) ^ (v >> 63))  // zigzag: small negatives stay short
        while u >= 0x80 {
            base[count] = UInt8(truncatingIfNeeded: u) | 0x80
            count += 1
            u >>= 7
        }
        base[count] = UInt8(u)
        count += 1
    }

    mutating func bool(_ b: Bool) {
        reserve(1)
        base[count] = b ? 1 : 0
        count += 1
    }

    mutating func data(_ b: [UInt8]) { b.withUnsafeBufferPointer { data($0) } }

    mutating func data(_ b: UnsafeBufferPointer<UInt8>) {
        int(Int64(b.count))
        append(b)
    }

    mutating func string(_ s: String) { s.withUTF8Bytes { data($0) } }

    /// Appends bytes as they are (no length before them).
    mutating func append(_ b: UnsafeBufferPointer<UInt8>) {
        guard let from = b.baseAddress, b.count > 0 else { return }
        reserve(b.count)
        (base + count).initialize(from: from, count: b.count)
        count += b.count
    }
}

/// Reads what `ByteWriter` wrote; throws on anything short or malformed.
struct ByteReader {
    let bytes: [UInt8]
    var i = 0

    var atEnd: Bool { i >= bytes.count }

    mutating func byte() throws -> UInt8 {
        guard i < bytes.count else { throw JournalError(description: "a journal entry ends early") }
        defer { i += 1 }
        return bytes[i]
    }

    mutating func int() throws -> Int64 {
        var u: UInt64 = 0
        var shift: UInt64 = 0
        while i < bytes.count {
            let b = bytes[i]
            i += 1
            u |= UInt64(b & 0x7F) << shift
            if b < 0x80 {
                let v = Int64(bitPattern: u >> 1)
                return u & 1 == 0 ? v : ~v
            }
            shift += 7
            guard shift < 64 else { throw JournalError(description: "a journal integer is too long") }
        }
        throw JournalError(description: "a journal entry ends early")
    }

    mutating func bool() throws -> Bool { try byte() != 0 }

    mutating func data() throws -> [UInt8] { Array(bytes[try range()]) }

    /// Where the next length-prefixed bytes lie, skipping them.
    mutating func range() throws -> Range<Int> {
        let n = Int(try int())
        guard n >= 0, n <= bytes.count - i else { throw JournalError(description: "a journal entry ends early") }
        defer { i += n }
        return i..<(i + n)
    }

    /// Records are checksummed and were written from valid strings, so decoding (which would
    /// repair, never trap) takes the fast path instead of validating generically.
    mutating func string() throws -> String {
        String(decoding: try data(), as: UTF8.self)
    }

    mutating func raw<T: RawRepresentable<String>>(_: T.Type) throws -> T {
        let s = try string()
        guard let v = T(rawValue: s) else { throw JournalError(description: "unknown value \"\(s)\" in the journal") }
        return v
    }
}
