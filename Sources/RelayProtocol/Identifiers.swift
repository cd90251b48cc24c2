// Syntax of the ids the contract names: family, member and session ids, and
// question UUIDs (case-insensitive on input, upper-case canonical on output).

public enum Identifier {
    /// `[A-Za-z0-9._-]{1,64}`: family, member and session ids.
    public static func isValid(_ s: String) -> Bool {
        let u = s.utf8
        guard (1...64).contains(u.count) else { return false }
        return u.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
                || c == UInt8(ascii: ".") || c == UInt8(ascii: "_") || c == UInt8(ascii: "-")
        }
    }
}

/// A question's UUID as its 128 bits: what the relay files questions under. (A string
/// key cost a hash over 36 bytes and a compare through a pointer on every lookup, the
/// most frequent cache miss of a busy relay.)
public struct QuestionID: Hashable, Sendable, CustomStringConvertible {
    public let high: UInt64
    public let low: UInt64

    /// The id of these 128 bits (as the store keeps them).
    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// Reads a UUID string (8-4-4-4-12 hex digits, either case); nil if it is not one.
    public init?(_ s: String) {
        guard let id = s.withUTF8Bytes(Self.init(utf8:)) else { return nil }
        self = id
    }

    /// Reads a UUID from its bytes.
    public init?(utf8 u: UnsafeBufferPointer<UInt8>) {
        guard u.count == 36, let (high, low) = Self.bits(u) else { return nil }
        self.high = high
        self.low = low
    }

    private static func bits(_ u: UnsafeBufferPointer<UInt8>) -> (UInt64, UInt64)? {
        let dash = UInt8(ascii: "-")
        guard u[8] == dash, u[13] == dash, u[18] == dash, u[23] == dash else { return nil }
        // Two words of 16 hex digits (8-4-4 | 4-12), read in fixed runs the compiler unrolls,
        // each digit looked up (a table is a third of the comparisons' instructions); any
        // byte that is not a hex digit leaves 0x10 in `bad`.
        return hexValues.withUnsafeBufferPointer { table in
            var high: UInt64 = 0
            var low: UInt64 = 0
            var bad: UInt8 = 0
            @inline(__always) func read(_ run: Range<Int>, into word: inout UInt64) {
                for i in run {
                    let v = table[Int(u[i])]
                    bad |= v
                    word = word << 4 | UInt64(v & 0xF)
                }
            }
            read(0..<8, into: &high)
            read(9..<13, into: &high)
            read(14..<18, into: &high)
            read(19..<23, into: &low)
            read(24..<36, into: &low)
            return bad & 0x10 == 0 ? (high, low) : nil
        }
    }

    /// Each byte's `hexValue`.
    private static let hexValues: [UInt8] = (0...255).map { hexValue(UInt8($0)) }

    /// A hex digit's value, or 0x10 for any other byte.
    @inline(__always) private static func hexValue(_ c: UInt8) -> UInt8 {
        let digit = c &- UInt8(ascii: "0")
        if digit < 10 { return digit }
        let letter = (c | 0x20) &- UInt8(ascii: "a")  // either case
        return letter < 6 ? letter &+ 10 : 0x10
    }

    /// The canonical upper-case form.
    public var description: String {
        String(unsafeUninitializedCapacity: 36) { out in
            write(into: out)
            return 36
        }
    }

    /// Calls `body` with the canonical upper-case form's 36 bytes, put together on the stack.
    @inlinable public func withCanonicalBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 36) { buf in
            write(into: buf)
            return try body(UnsafeBufferPointer(buf))
        }
    }

    /// Writes the canonical form into the first 36 bytes of `out`: the 32 digits made
    /// eight at a time, then copied out in runs between the dashes.
    @usableFromInline func write(into out: UnsafeMutableBufferPointer<UInt8>) {
        precondition(out.count >= 36)
        let words = (
            Self.hexDigits(UInt32(truncatingIfNeeded: high >> 32)), Self.hexDigits(UInt32(truncatingIfNeeded: high)),
            Self.hexDigits(UInt32(truncatingIfNeeded: low >> 32)), Self.hexDigits(UInt32(truncatingIfNeeded: low))
        )
        withUnsafeBytes(of: words) { digits in
            let to = UnsafeMutableRawPointer(out.baseAddress!)
            var at = 0
            for (start, end) in [(0, 8), (8, 12), (12, 16), (16, 20), (20, 32)] {
                if start > 0 {
                    to.storeBytes(of: UInt8(ascii: "-"), toByteOffset: at, as: UInt8.self)
                    at += 1
                }
                to.advanced(by: at).copyMemory(from: digits.baseAddress! + start, byteCount: end - start)
                at += end - start
            }
        }
    }

    /// `x`'s eight upper-case hex digits as a word whose bytes in memory are the digits in
    /// order: each nibble spread into a byte of its own, then made a digit or a letter, all
    /// eight at once.
    @usableFromInline static func hexDigits(_ x: UInt32) -> UInt64 {
        var v = UInt64(x)
        v = (v | v << 16) & 0x0000_FFFF_0000_FFFF
        v = (v | v << 8) & 0x00FF_00FF_00FF_00FF
        v = (v | v << 4) & 0x0F0F_0F0F_0F0F_0F0F
        let isLetter = ((v &+ 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101
        v = v &+ 0x3030_3030_3030_3030 &+ isLetter &* 7  // '0' + n, or 'A' + n - 10
        return UInt64(bigEndian: v)
    }
}
