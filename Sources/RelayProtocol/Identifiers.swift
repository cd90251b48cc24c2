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

    /// The canonical upper-case form of a UUID string (8-4-4-4-12 hex digits), or nil.
    public static func canonicalUUID(_ s: String) -> String? {
        let u = Array(s.utf8)
        guard u.count == 36 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(36)
        for (i, c) in u.enumerated() {
            if i == 8 || i == 13 || i == 18 || i == 23 {
                guard c == UInt8(ascii: "-") else { return nil }
                out.append(c)
            } else if (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) {
                out.append(c)
            } else if c >= 0x61 && c <= 0x66 {
                out.append(c - 0x20)
            } else {
                return nil
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
