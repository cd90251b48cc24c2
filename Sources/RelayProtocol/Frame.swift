// Length-prefixed framing (wire contract §1): a 4-byte unsigned big-endian length N,
// then N bytes of JSON. The decoder judges a length on the header alone, before any
// of the body arrives, so an oversized frame is never buffered.

/// The default and the contract's example maximum frame size: 1 MiB.
public let defaultMaxFrameBytes = 1_048_576

/// One step of frame decoding.
public enum FrameEvent: Equatable, Sendable {
    /// A complete frame body.
    case frame([UInt8])
    /// The stream broke a framing rule; the connection must be closed after the error.
    case violation(ErrorCode, String)
}

/// Splits a byte stream into frame bodies.
public struct FrameDecoder: Sendable {
    public let maxFrameBytes: Int
    private var buffer: [UInt8] = []
    private var start = 0
    private var broken = false

    public init(maxFrameBytes: Int = defaultMaxFrameBytes) {
        self.maxFrameBytes = maxFrameBytes
    }

    /// Bytes received but not yet returned as a frame.
    public var bufferedCount: Int { buffer.count - start }

    public mutating func append<C: Collection<UInt8>>(_ bytes: C) {
        compact()
        buffer.append(contentsOf: bytes)
    }

    /// Appends bytes in one copy (the generic `append` goes through the collection's witnesses).
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        compact()
        buffer.append(contentsOf: bytes.assumingMemoryBound(to: UInt8.self))
    }

    private mutating func compact() {
        if start > 0 && start >= buffer.count / 2 {
            buffer.removeFirst(start)
            start = 0
        }
    }

    /// The next frame or violation, or nil when more bytes are needed.
    public mutating func next() -> FrameEvent? {
        var body: [UInt8] = []
        switch withNextFrame({ body = Array($0) }) {
        case .frame: return .frame(body)
        case .violation(let code, let message): return .violation(code, message)
        case .incomplete: return nil
        }
    }

    /// What `withNextFrame` found.
    public enum Step {
        /// A frame, which `body` was called with.
        case frame
        case violation(ErrorCode, String)
        /// More bytes are needed.
        case incomplete
    }

    /// Calls `body` with the next frame's body, in place (valid during the call only: one
    /// copy and allocation less per frame than `next`); or says what else came.
    public mutating func withNextFrame(_ body: (UnsafeBufferPointer<UInt8>) -> Void) -> Step {
        guard !broken, buffer.count - start >= 4 else { return .incomplete }
        let n =
            Int(buffer[start]) << 24 | Int(buffer[start + 1]) << 16 | Int(buffer[start + 2]) << 8
            | Int(buffer[start + 3])
        if n == 0 {
            broken = true
            return .violation(.badFrame, "a frame of length 0 is not allowed")
        }
        if n > maxFrameBytes {
            broken = true
            return .violation(.frameTooLarge, "frame of \(n) bytes exceeds the maximum of \(maxFrameBytes) bytes")
        }
        guard buffer.count - start >= 4 + n else { return .incomplete }
        let range = (start + 4)..<(start + 4 + n)
        buffer.withUnsafeBufferPointer { body(UnsafeBufferPointer(rebasing: $0[range])) }
        start = range.upperBound
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.capacity <= 65536)
            start = 0
        }
        return .frame
    }
}

/// Prefixes a frame body with its 4-byte big-endian length.
public func framed(_ body: [UInt8]) -> [UInt8] {
    frame(capacity: body.count) { $0.append(bytes: body) }
}

/// A complete frame whose body `writeBody` appends: the length header is filled in after.
/// `buffer`, empty, may lend its storage.
public func frame(capacity: Int = 256, in buffer: consuming [UInt8] = [], _ writeBody: (inout [UInt8]) -> Void) -> [UInt8] {
    buffer.reserveCapacity(capacity + 4)
    buffer.appendFrame(writeBody)
    return buffer
}

extension [UInt8] {
    /// Appends a complete frame whose body `writeBody` appends after the header, which is
    /// filled in after (one pass, no second buffer).
    @inlinable public mutating func appendFrame(_ writeBody: (inout [UInt8]) -> Void) {
        let header = count
        for _ in 0..<4 { append(0) }
        writeBody(&self)
        let n = UInt32(count - header - 4)
        self[header] = UInt8(n >> 24)
        self[header + 1] = UInt8(n >> 16 & 0xFF)
        self[header + 2] = UInt8(n >> 8 & 0xFF)
        self[header + 3] = UInt8(n & 0xFF)
    }
}

extension JSONObject {
    /// The complete frame (length header and body) of this object.
    public var frame: [UInt8] { RelayProtocol.frame { encode(into: &$0) } }

    /// Appends the fields as `,"key":value` each, to follow fields already written.
    public func encodeFields(into out: inout [UInt8]) {
        for field in fields {
            out.append(UInt8(ascii: ","))
            JSON.string(field.key).encode(into: &out)
            out.append(UInt8(ascii: ":"))
            field.value.encode(into: &out)
        }
    }
}
