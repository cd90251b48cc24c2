// The compact binary form the journal and the event batches are written in: zigzag
// varints and length-prefixed bytes, read back with every length checked.

import RelayProtocol

/// A journal entry could not be read back.
struct JournalError: Error, CustomStringConvertible {
    let description: String
}

/// Appends little-endian varints and length-prefixed bytes.
struct ByteWriter {
    var bytes: [UInt8] = []

    mutating func int(_ v: Int64) {
        var u = UInt64(bitPattern: (v << 1) ^ (v >> 63))  // zigzag: small negatives stay short
        while u >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: u) | 0x80)
            u >>= 7
        }
        bytes.append(UInt8(u))
    }

    mutating func bool(_ b: Bool) { bytes.append(b ? 1 : 0) }

    mutating func data(_ b: [UInt8]) { b.withUnsafeBufferPointer { data($0) } }

    mutating func data(_ b: UnsafeBufferPointer<UInt8>) {
        int(Int64(b.count))
        bytes.append(contentsOf: b)
    }

    mutating func string(_ s: String) {
        int(Int64(s.utf8.count))
        bytes.append(utf8: s)
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
