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

    /// Reads a UUID string (8-4-4-4-12 hex digits, either case); nil if it is not one.
    public init?(_ s: String) {
        guard s.utf8.count == 36 else { return nil }
        var s = s
        guard let (high, low) = s.withUTF8(Self.bits) else { return nil }
        self.high = high
        self.low = low
    }

    private static func bits(_ u: UnsafeBufferPointer<UInt8>) -> (UInt64, UInt64)? {
        var words: (UInt64, UInt64) = (0, 0)
        var digits = 0
        for index in 0..<36 {
            let c = u[index]
            if index == 8 || index == 13 || index == 18 || index == 23 {
                guard c == UInt8(ascii: "-") else { return nil }
                continue
            }
            let v: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): v = c &- UInt8(ascii: "0")
            case UInt8(ascii: "A")...UInt8(ascii: "F"): v = c &- UInt8(ascii: "A") &+ 10
            case UInt8(ascii: "a")...UInt8(ascii: "f"): v = c &- UInt8(ascii: "a") &+ 10
            default: return nil
            }
            if digits < 16 { words.0 = words.0 << 4 | UInt64(v) } else { words.1 = words.1 << 4 | UInt64(v) }
            digits += 1
        }
        return words
    }

    /// The canonical upper-case form.
    public var description: String {
        String(unsafeUninitializedCapacity: 36) { out in
            var at = 0
            for k in 0..<32 {
                if k == 8 || k == 12 || k == 16 || k == 20 {
                    out[at] = UInt8(ascii: "-")
                    at += 1
                }
                let nibble = UInt8(truncatingIfNeeded: (k < 16 ? high : low) >> UInt64(60 - 4 * (k % 16)) & 0xF)
                out[at] = nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "A") + nibble - 10
                at += 1
            }
            return 36
        }
    }
}
