// Communication handles and the contract's normalization (§5): phone numbers keep a
// leading `+` and digits only (no country is guessed), e-mail addresses are trimmed
// and lower-cased, custom values are compared exactly.

/// The kind of a communication handle.
public enum HandleKind: String, Sendable, CaseIterable, Hashable {
    case phoneNumber, emailAddress, custom

    /// By case, not by name: a raw-valued enum otherwise hashes its raw string, and handles
    /// (kind and value) are looked up for every question.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .phoneNumber: hasher.combine(0 as UInt8)
        case .emailAddress: hasher.combine(1 as UInt8)
        case .custom: hasher.combine(2 as UInt8)
        }
    }
}

/// A handle as compared by the relay: its kind and normalized value.
public struct NormalizedHandle: Hashable, Sendable, Comparable {
    public var kind: HandleKind
    public var value: String

    public init(kind: HandleKind, value: String) {
        self.kind = kind
        self.value = value
    }

    /// The longest value a new handle may have (a question's, or one a guardian adds), in
    /// bytes of UTF-8 as written: known handles are all held in memory, and a child may keep
    /// a hundred thousand. Handles stored before, or come through the hub, are read whatever
    /// their length: that is why `init` does not check it.
    public static let maxValueBytes = 2048

    /// Normalizes `value` of `kind`; nil when the value is invalid for its kind.
    public init?(kind: HandleKind, rawValue: String) {
        self.kind = kind
        switch kind {
        case .phoneNumber:
            // Only digits are kept, so whitespace matters only before a leading "+"; the
            // Unicode-aware trim runs only when the value does not start with plain ASCII.
            let first = rawValue.utf8.first ?? 0
            let plus =
                first > 0x20 && first < 0x80
                ? first == UInt8(ascii: "+") : rawValue.trimmingWhitespace().utf8.first == UInt8(ascii: "+")
            var raw = rawValue
            guard let normalized = raw.withUTF8({ Self.phoneNumber($0, plus: plus) }) else { return nil }
            value = normalized
        case .emailAddress:
            let v = rawValue.trimmingWhitespace().lowercased()
            guard !v.isEmpty, v.contains("@") else { return nil }
            value = v
        case .custom:
            guard !rawValue.isEmpty else { return nil }
            value = rawValue
        }
    }

    /// The same from a value of plain ASCII (no control characters), without making a
    /// string of a phone number first.
    init?(kind: HandleKind, plainASCII raw: UnsafeBufferPointer<UInt8>) {
        guard kind == .phoneNumber else {
            self.init(kind: kind, rawValue: String(decoding: raw, as: UTF8.self))
            return
        }
        guard let normalized = Self.phoneNumber(raw, plus: raw.first { $0 != UInt8(ascii: " ") } == UInt8(ascii: "+"))
        else { return nil }
        self.init(kind: kind, value: normalized)
    }

    /// The digits of `raw`, after a `+` if `plus`; nil if there are none. Written into a
    /// buffer on the stack: a handle is normalized for every question asked.
    private static func phoneNumber(_ raw: UnsafeBufferPointer<UInt8>, plus: Bool) -> String? {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: raw.count + 1) { out -> String? in
            var n = 0
            if plus {
                out[0] = UInt8(ascii: "+")
                n = 1
            }
            for c in raw where c >= 48 && c <= 57 {
                out[n] = c
                n += 1
            }
            guard n > (plus ? 1 : 0) else { return nil }
            return String(decoding: UnsafeBufferPointer(rebasing: out[..<n]), as: UTF8.self)
        }
    }

    /// Why `json` is not a valid handle (`init(json:)` gives nil), as the end of a sentence
    /// that names it.
    public static func whyInvalid(_ json: JSON) -> String {
        guard let value = json["value"]?.string, let kindName = json["kind"]?.string else {
            return "is not a valid handle: it needs a string \"value\" and \"kind\""
        }
        guard HandleKind(rawValue: kindName) != nil else {
            return "is not a valid handle: its kind \"\(kindName)\" is not phoneNumber, emailAddress or custom"
        }
        return "is not a valid handle: \"\(value)\" is not a valid \(kindName) (a phone number has digits, an email address an @,"
            + " a custom handle is not empty)"
    }

    /// Reads `{"value": …, "kind": …}`; nil when it is not a valid handle.
    public init?(json: JSON) {
        guard let value = json["value"]?.string, let kindName = json["kind"]?.string,
            let kind = HandleKind(rawValue: kindName)
        else { return nil }
        self.init(kind: kind, rawValue: value)
    }

    public var json: JSON { .object(["value": .string(value), "kind": .string(kind.rawValue)]) }

    /// One string that identifies the handle (kind and value).
    public var key: String { kind.rawValue + ":" + value }

    /// By kind, then by the value's bytes (as `==` compares them).
    public static func < (a: NormalizedHandle, b: NormalizedHandle) -> Bool {
        a.kind != b.kind ? a.kind.rawValue < b.kind.rawValue : a.value.utf8.lexicographicallyPrecedes(b.value.utf8)
    }

    /// Exactly, by the value's bytes: Swift's strings would take "é" and "e" followed by
    /// a combining accent as equal, and the contract compares custom values exactly.
    public static func == (a: NormalizedHandle, b: NormalizedHandle) -> Bool {
        a.kind == b.kind && a.value.utf8.elementsEqual(b.value.utf8)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(kind)
        hasher.combine(value.utf8.count)
        if value.utf8.withContiguousStorageIfAvailable({ hasher.combine(bytes: UnsafeRawBufferPointer($0)) }) == nil {
            for byte in value.utf8 { hasher.combine(byte) }
        }
    }
}

extension String {
    func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })!
        return String(scalars[first...last])
    }
}
