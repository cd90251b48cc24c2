// The lists a remembered question keeps beside its canonical bytes, each in about a
// word rather than an array of its own.

/// Communication actions in the order asked, each kept as its place in
/// `communicationActions`, four bits apiece: a list of strings cost every remembered
/// question an allocation for what fits in a word. At most 15 (there are ten, each once).
public struct ActionList: RandomAccessCollection, Equatable, Sendable {
    /// The count in the low four bits, then one place per four bits.
    private var packed: UInt64 = 0

    public init() {}

    /// What an absent or empty list of actions means.
    public static let communicate = ActionList(["communicate"])!

    /// The list of `names`; nil if one is not a communication action or there are too many.
    public init?(_ names: some Sequence<String>) {
        for name in names {
            guard let k = communicationActions.firstIndex(of: name), count < 15 else { return nil }
            append(place: k)
        }
    }

    public var startIndex: Int { 0 }
    public var endIndex: Int { Int(packed & 0xF) }
    public subscript(i: Int) -> String { communicationActions[place(at: i)] }

    /// Appends the action at `place` in `communicationActions`.
    mutating func append(place: Int) {
        precondition(count < 15 && place < 16)
        packed |= UInt64(place) << (4 + 4 * UInt64(count))
        packed += 1
    }

    private func place(at i: Int) -> Int {
        precondition(i >= 0 && i < count)
        return Int(packed >> (4 + 4 * UInt64(i)) & 0xF)
    }
}

/// A question's handles. Nearly every question names one person, whose handle is kept in
/// place: an array of one cost every remembered question an allocation.
public enum HandleList: RandomAccessCollection, Equatable, Sendable {
    case none
    case one(NormalizedHandle)
    case many([NormalizedHandle])

    public init() { self = .none }

    public init(_ handles: [NormalizedHandle]) {
        switch handles.count {
        case 0: self = .none
        case 1: self = .one(handles[0])
        default: self = .many(handles)
        }
    }

    public mutating func append(_ h: NormalizedHandle) {
        switch self {
        case .none: self = .one(h)
        case .one(let first): self = .many([first, h])
        case .many(var list):
            self = .none  // so that `list` is the array's only holder
            list.append(h)
            self = .many(list)
        }
    }

    public var startIndex: Int { 0 }

    public var endIndex: Int {
        switch self {
        case .none: 0
        case .one: 1
        case .many(let list): list.count
        }
    }

    public subscript(i: Int) -> NormalizedHandle {
        switch self {
        case .one(let h) where i == 0: h
        case .many(let list): list[i]
        default: preconditionFailure("handle \(i) of \(count)")
        }
    }
}
