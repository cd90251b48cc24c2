// Instants as milliseconds since the Unix epoch, with RFC 3339 parsing (any UTC
// offset, converted) and formatting (UTC, `Z`). Milliseconds keep arithmetic exact
// and comparisons cheap; the contract allows fractional seconds on the wire.

/// An instant, in milliseconds since 1970-01-01T00:00:00Z.
public struct Timestamp: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var milliseconds: Int64

    public init(milliseconds: Int64) { self.milliseconds = milliseconds }

    public static func < (a: Timestamp, b: Timestamp) -> Bool { a.milliseconds < b.milliseconds }

    /// `seconds` later (earlier when negative), held at the ends of the range.
    /// The last instant RFC 3339 can write (its years have four digits).
    public static let latest = Timestamp(milliseconds: 253_402_300_799_999)  // 9999-12-31T23:59:59.999Z
    /// The first instant RFC 3339 can write.
    public static let earliest = Timestamp(milliseconds: -62_167_219_200_000)  // 0000-01-01T00:00:00Z

    public func adding(seconds: Int64) -> Timestamp {
        let (ms, product) = seconds.multipliedReportingOverflow(by: 1000)
        let (sum, total) = milliseconds.addingReportingOverflow(ms)
        guard product || total else { return Timestamp(milliseconds: sum) }
        return Timestamp(milliseconds: seconds < 0 ? .min : .max)
    }

    public var description: String { rfc3339 }

    /// `2026-12-01T18:00:00Z`, with `.mmm` when the instant has milliseconds.
    public var rfc3339: String {
        var out: [UInt8] = []
        out.reserveCapacity(24)
        appendRFC3339(to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends `rfc3339`'s bytes.
    public func appendRFC3339(to out: inout [UInt8]) { withRFC3339 { out.append(contentsOf: $0) } }

    /// Calls `body` with `rfc3339`'s bytes: it is formatted for every event that carries a
    /// time, so it is written into a small buffer that the caller copies whole, with what
    /// goes around it (appending byte by byte checked the array's capacity and uniqueness
    /// some thirty times).
    func withRFC3339<R>(_ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        // Floor division in integers: exact for every Int64 (through Double, instants past
        // 2^53 ms fell on the wrong day and printed a negative time of day).
        var days = milliseconds / 86_400_000
        var msOfDay = milliseconds % 86_400_000
        if msOfDay < 0 {
            days -= 1
            msOfDay += 86_400_000
        }
        let (y, m, d) = Timestamp.civil(fromDays: days)
        let secs = msOfDay / 1000
        let ms = msOfDay % 1000
        // At most 31 bytes: a sign, 19 digits of year, "-MM-DDTHH:MM:SS.mmmZ".
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 40) { buf in
            var n = 0
            func put(_ c: UInt8) {
                buf[n] = c
                n += 1
            }
            /// `v` in 0...99 as two digits.
            func two(_ v: Int64) {
                put(UInt8(truncatingIfNeeded: 48 + v / 10))
                put(UInt8(truncatingIfNeeded: 48 + v % 10))
            }
            if (0...9999).contains(y) {
                two(y / 100)
                two(y % 100)
            } else {
                if y < 0 { put(UInt8(ascii: "-")) }
                // abs(y) in decimal, zero-padded to at least four digits.
                var digits: [UInt8] = []
                var v = y.magnitude
                while v > 0 || digits.count < 4 {
                    digits.append(UInt8(48 + v % 10))
                    v /= 10
                }
                for c in digits.reversed() { put(c) }
            }
            put(UInt8(ascii: "-"))
            two(m)
            put(UInt8(ascii: "-"))
            two(d)
            put(UInt8(ascii: "T"))
            two(secs / 3600)
            put(UInt8(ascii: ":"))
            two(secs / 60 % 60)
            put(UInt8(ascii: ":"))
            two(secs % 60)
            if ms != 0 {
                put(UInt8(ascii: "."))
                put(UInt8(truncatingIfNeeded: 48 + ms / 100))
                two(ms % 100)
            }
            put(UInt8(ascii: "Z"))
            return body(UnsafeBufferPointer(rebasing: buf[0..<n]))
        }
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`; nil when the text is not such a
    /// timestamp, or names an instant whose year in UTC would not have four digits (it
    /// could not be written back).
    public init?(rfc3339 text: String) {
        let b = Array(text.utf8)
        var i = 0
        func num(_ n: Int) -> Int64? {
            guard i + n <= b.count else { return nil }
            var v: Int64 = 0
            for k in 0..<n {
                let c = b[i + k]
                guard c >= 48, c <= 57 else { return nil }
                v = v * 10 + Int64(c - 48)
            }
            i += n
            return v
        }
        func take(_ chars: String) -> Bool {
            guard i < b.count, chars.utf8.contains(b[i]) else { return false }
            i += 1
            return true
        }
        guard let y = num(4), take("-"), let mo = num(2), take("-"), let d = num(2), take("Tt "),
            let h = num(2), take(":"), let mi = num(2), take(":"), let s = num(2)
        else { return nil }
        guard (1...12).contains(mo), (1...Timestamp.daysIn(month: mo, year: y)).contains(d), h < 24, mi < 60, s < 61
        else { return nil }
        var ms: Int64 = 0
        if take(".") {
            var digits = 0
            while i < b.count, b[i] >= 48, b[i] <= 57 {
                if digits < 3 { ms = ms * 10 + Int64(b[i] - 48) }
                digits += 1
                i += 1
            }
            guard digits > 0 else { return nil }
            for _ in digits..<max(digits, 3) { ms *= 10 }
        }
        var offsetMinutes: Int64 = 0
        if take("Zz") {
        } else if i < b.count, b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
            let sign: Int64 = b[i] == UInt8(ascii: "-") ? -1 : 1
            i += 1
            guard let oh = num(2), take(":"), let om = num(2), oh < 24, om < 60 else { return nil }
            offsetMinutes = sign * (oh * 60 + om)
        } else {
            return nil
        }
        guard i == b.count else { return nil }
        let days = Timestamp.days(fromCivil: y, mo, d)
        let seconds = days * 86400 + h * 3600 + mi * 60 + min(s, 59) - offsetMinutes * 60
        self.milliseconds = seconds * 1000 + ms
        guard Timestamp.earliest <= self, self <= Timestamp.latest else { return nil }
    }

    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    // Howard Hinnant's days_from_civil / civil_from_days.
    static func days(fromCivil y0: Int64, _ m: Int64, _ d: Int64) -> Int64 {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146097 + doe - 719468
    }

    static func civil(fromDays z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let doe = z - era * 146097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? y + 1 : y, m, d)
    }
}
