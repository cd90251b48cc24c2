// A small blocking client connection: the admin commands and the tests use it to
// speak framed JSON to a running relay.

import CSystem
import Glibc
import RelayProtocol

/// A blocking framed-JSON connection to a relay socket.
public final class BlockingConnection {
    public let fd: Int32
    private var decoder = FrameDecoder(maxFrameBytes: 64 << 20)
    private var nextRequest = 1

    /// Connects to `path`; throws a readable error when no relay listens there.
    public init(path: String) throws {
        let fd = cs_connect_unix(path)
        guard fd >= 0 else { throw ServerError(RelayDefaults.connectFailure(path, error: errno)) }
        self.fd = fd
    }

    deinit { Glibc.close(fd) }

    /// Sets how long a read may block.
    public func setTimeout(seconds: Double) {
        var tv = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1e6))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    public func sendRaw(_ bytes: [UInt8]) throws {
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + off, bytes.count - off, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw ServerError("the relay closed the connection") }
            off += n
        }
    }

    public func send(_ o: JSONObject) throws { try sendRaw(o.frame) }

    /// The next frame, or nil when the relay closed the connection.
    public func receive() throws -> JSONObject? {
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            if let e = decoder.next() {
                guard case .frame(let body) = e, let o = try? JSON.parse(body).object else {
                    throw ServerError("the relay sent a malformed frame")
                }
                return o
            }
            let n = buf.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return nil }
            if n < 0 {
                if errno == EAGAIN || errno == EWOULDBLOCK { throw ServerError("timed out waiting for the relay") }
                if errno == EINTR { continue }
                if errno == ECONNRESET { return nil }
                throw ServerError("reading from the relay failed: \(String(cString: strerror(errno)))")
            }
            decoder.append(buf[0..<n])
        }
    }

    /// Sends a request with a fresh id and returns its reply, skipping events and pings.
    public func request(_ o: JSONObject) throws -> JSONObject {
        var o = o
        let id = "r\(nextRequest)"
        nextRequest += 1
        o["id"] = .string(id)
        try send(o)
        return try reply(to: id)
    }

    /// Waits for the reply to `id` (answering pings), skipping anything else. A connection
    /// that ends first after an error that answers no request (a relay refusing it: out of
    /// disk space, at its connection limit) fails with that error's words.
    public func reply(to id: String) throws -> JSONObject {
        var refusal: JSONObject?
        while let f = try receive() {
            if f["type"]?.string == "ping" { try send(["type": "pong"]) }
            if f["re"]?.string == id { return f }
            if f["type"]?.string == "error" && f["re"] == nil { refusal = f }
        }
        if let refusal {
            throw ServerError(
                "the relay refused the connection (\(refusal["code"]?.string ?? "error")): \(refusal["message"]?.string ?? "no reason given")"
            )
        }
        throw ServerError("the relay closed the connection before replying")
    }
}
