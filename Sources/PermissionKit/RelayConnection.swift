// The connection under AskCenter and GuardianCenter: one I/O thread per connection
// that connects, says hello with the durable session and the last processed seq,
// resends every request whose reply never came (the relay is idempotent), acks what
// the owner processed, pings, and reconnects with capped exponential backoff and
// jitter. Callers only enqueue and await; the thread owns the socket.

import CSystem
import Foundation
import Glibc
import RelayProtocol
import Synchronization

/// Whether the client can reach the relay now.
public enum ConnectionState: String, Sendable, Equatable {
    /// Connecting (or reconnecting) and saying hello.
    case connecting
    /// Connected; requests go out at once.
    case ready
    /// The last attempt failed; the client keeps retrying in the background.
    case unavailable
    /// Another client opened the same durable session (same member, same session name)
    /// and the relay closed this connection in its favour. The client connects again after
    /// a pause that doubles each time this happens in a row (1 s up to 32 s): two clients
    /// that share a session name take it from each other ever more rarely, instead of as
    /// fast as they can. Give each app or device a session name of its own.
    case replaced
    /// The relay refused the member, its token or its hello (a rotated token, a removed
    /// member, a malformed session name). The client stops connecting, since trying again
    /// would be refused again, and every request fails with `ClientError.unauthorized`
    /// (as `AskError.systemError`); a center with new credentials is needed.
    case refused
}

final class RelayConnection: Sendable {
    let config: RelayConfiguration
    private let shared: Mutex<Shared>
    private let wakeFDs: (read: Int32, write: Int32)
    /// Called on the I/O thread for each event, in stream order.
    private let onEvent: @Sendable (JSONObject) -> Void
    /// Requests (without ids) sent after every welcome, replies ignored (e.g. subscribe).
    private let setup: @Sendable () -> [JSONObject]
    /// The highest seq already processed, for `resume`.
    private let resumePoint: @Sendable () -> Int64?
    /// Called with every welcome (its `cursor` tells where the stream resumes).
    private let onWelcome: @Sendable (JSONObject) -> Void
    /// Called once the thread has ended, closed or refused for good.
    private let onEnd: @Sendable () -> Void

    private struct Pending {
        let id: String
        let frame: JSONObject
        /// The frame's size, encoded: one larger than the relay takes is never sent.
        let size: Int
        let deadline: ContinuousClock.Instant
        let continuation: CheckedContinuation<JSONObject, any Error>
        var sent = false
        /// Sent on an earlier connection too.
        var sentBefore = false
    }

    private struct Shared {
        var state = ConnectionState.connecting
        var pending: [Pending] = []
        var ackToSend: Int64?
        /// When `ackToSend` goes out on its own if no frame has carried it before.
        var ackDue: ContinuousClock.Instant?
        var extraFrames: [JSONObject] = []
        var watchers: [UUID: AsyncStream<ConnectionState>.Continuation] = [:]
        var closed = false
        /// The relay said it closes the connection because another client took its session.
        var replaced = false
        /// Why the relay last said it closes the connection (`tokenRotated`, say).
        var closedBecause: String?
        /// The relay refused the credentials: the thread ends, and requests fail with `lastError`.
        var refused = false
        /// The I/O thread has ended.
        var finished = false
        var nextID = 1
        var lastError: ClientError?

        /// What a request fails with once the connection is closed for good.
        var closedError: ClientError { refused ? lastError ?? .closed : .closed }
    }

    init(
        config: RelayConfiguration, resumePoint: @escaping @Sendable () -> Int64?,
        onWelcome: @escaping @Sendable (JSONObject) -> Void = { _ in },
        setup: @escaping @Sendable () -> [JSONObject], onEvent: @escaping @Sendable (JSONObject) -> Void,
        onEnd: @escaping @Sendable () -> Void = {}
    ) {
        self.config = config
        self.onEnd = onEnd
        self.resumePoint = resumePoint
        self.onWelcome = onWelcome
        self.setup = setup
        self.onEvent = onEvent
        self.shared = Mutex(Shared())
        var fds: [Int32] = [-1, -1]
        _ = cs_pipe(&fds)
        wakeFDs = (fds[0], fds[1])
    }

    /// Starts connecting, on the connection's own thread. The owner calls it once its
    /// callbacks can take events: one that came earlier would have nowhere to go.
    func start() {
        let thread = Thread { [self] in run() }
        thread.name = "permission-kit-io"
        thread.start()
    }

    /// Why the last connection attempt failed, while no later one has succeeded.
    var lastError: ClientError? { shared.withLock { $0.lastError } }

    /// Stops the I/O thread; pending requests fail with `ClientError.closed`.
    func close() {
        shared.withLock { $0.closed = true }
        wake()
    }

    /// Stops the I/O thread and waits until it has ended (every processed event recorded).
    func closeAndWait() async {
        let states = states()
        close()
        for await _ in states {}
    }

    var state: ConnectionState { shared.withLock { $0.state } }

    /// The connection state now and on every change.
    func states() -> AsyncStream<ConnectionState> {
        let (stream, continuation) = AsyncStream<ConnectionState>.makeStream(bufferingPolicy: .bufferingNewest(8))
        let key = UUID()
        // The state now goes first, under the lock: a change meanwhile follows it, never precedes it.
        let finished = shared.withLock { s -> Bool in
            continuation.yield(s.state)
            if !s.finished { s.watchers[key] = continuation }
            return s.finished
        }
        if finished { continuation.finish() }
        continuation.onTermination = { [weak self] _ in self?.shared.withLock { _ = $0.watchers.removeValue(forKey: key) } }
        return stream
    }

    /// Sends a request and returns the relay's reply (`ok` or `error`); waits through
    /// reconnects until the configured timeout, then throws `ClientError.unavailable`.
    func request(_ body: JSONObject, timeout: Duration? = nil) async throws -> JSONObject {
        try Task.checkCancellation()  // a task cancelled already sends nothing
        let deadline = ContinuousClock.now + (timeout ?? config.requestTimeout)
        let id = freshID()
        var frame = body
        frame["id"] = .string(id)
        let size = frame.encoded.count
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<JSONObject, any Error>) in
                let refused = shared.withLock { s -> (any Error)? in
                    if s.closed { return s.closedError }
                    s.pending.append(Pending(id: id, frame: frame, size: size, deadline: deadline, continuation: c))
                    return nil
                }
                if let refused { c.resume(throwing: refused) } else { wake() }
            }
        } onCancel: {
            let p = shared.withLock { s -> Pending? in
                guard let i = s.pending.firstIndex(where: { $0.id == id }) else { return nil }
                return s.pending.remove(at: i)
            }
            p?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Acknowledges every event up to `seq`: with the next frame sent, or on its own once
    /// `ackDelay` has passed since the oldest event it leaves unacknowledged.
    func ack(_ seq: Int64) {
        let first = shared.withLock { s -> Bool in
            s.ackToSend = max(s.ackToSend ?? 0, seq)
            guard s.ackDue == nil else { return false }
            s.ackDue = .now + config.ackDelay
            return true
        }
        if first { wake() }  // the thread's wait must end by the ack's due time
    }

    /// Sends a frame without a reply (e.g. a fresh subscribe) if connected.
    func sendLater(_ frame: JSONObject) {
        let frame = withID(frame, freshID())
        shared.withLock { $0.extraFrames.append(frame) }
        wake()
    }

    private func wake() {
        var b: UInt8 = 1
        _ = Glibc.write(wakeFDs.write, &b, 1)
    }

    private func drainWake() {
        var buf = [UInt8](repeating: 0, count: 64)
        while Glibc.read(wakeFDs.read, &buf, 64) > 0 {}
    }

    private func setState(_ new: ConnectionState, error: ClientError? = nil) {
        let watchers = shared.withLock { s -> [AsyncStream<ConnectionState>.Continuation] in
            if let error { s.lastError = error }
            if new == .ready { s.lastError = nil }  // a failed attempt before this one is not why anything fails now
            guard s.state != new else { return [] }
            s.state = new
            return Array(s.watchers.values)
        }
        for w in watchers { w.yield(new) }
    }

    // MARK: - The I/O thread

    /// The pause before connecting again after the `n`th replacement in a row, without
    /// its jitter.
    static func pauseAfterReplacement(_ n: Int) -> Duration { .seconds(1 << min(max(n, 1) - 1, 5)) }

    private func run() {
        var delay = config.reconnectDelay
        var replacedInARow = 0
        while !shared.withLock({ $0.closed }) {
            if let greeted = connectAndGreet() {
                let connected = ContinuousClock.now
                serve(greeted)
                Glibc.close(greeted.fd)
                guard !shared.withLock({ $0.closed }) else { continue }
                let replaced = shared.withLock { s in
                    defer { s.replaced = false }
                    return s.replaced
                }
                guard replaced else {
                    replacedInARow = 0
                    setState(.connecting)
                    // Closed soon after its welcome (a relay that ends the session at once, on
                    // a replay it cannot read, say): connecting again at once would loop.
                    if ContinuousClock.now - connected < .seconds(1) {
                        waitToReconnect(until: .now + delay * Double.random(in: 0.75...1.25))
                        delay = min(delay * 2, config.maxReconnectDelay)
                    } else {
                        delay = config.reconnectDelay
                    }
                    continue
                }
                delay = config.reconnectDelay
                // Taken back within the minute: the other client is still there.
                replacedInARow = ContinuousClock.now - connected < .seconds(60) ? replacedInARow + 1 : 1
                setState(
                    .replaced,
                    error: .unavailable(
                        "another client holds this session (\(config.member), \(config.session ?? "")) and this one waits to"
                            + " take it back; give each client a session of its own"))
                let pause = Self.pauseAfterReplacement(replacedInARow) * Double.random(in: 0.75...1.25)
                waitToReconnect(until: .now + pause, endedByRequests: false)
                continue
            }
            if shared.withLock({ $0.closed }) { break }  // refused: nothing to wait for
            waitToReconnect(until: .now + delay * Double.random(in: 0.75...1.25))
            delay = min(delay * 2, config.maxReconnectDelay)
        }
        let (pending, watchers, error) = shared.withLock { s in
            defer {
                s.pending.removeAll()
                s.watchers.removeAll()
                s.finished = true
            }
            return (s.pending, Array(s.watchers.values), s.closedError)
        }
        for p in pending { p.continuation.resume(throwing: error) }
        for w in watchers { w.finish() }
        onEnd()
    }

    // The wake pipe lives as long as the object: `wake` may still be called after the
    // thread ended, and a closed (or reused) descriptor must never be written to.
    deinit {
        Glibc.close(wakeFDs.read)
        Glibc.close(wakeFDs.write)
    }

    /// A connection past its welcome: the socket, the decoder's leftovers, frames that
    /// came in the same read as the welcome, and the relay's heartbeat interval.
    private struct Greeted {
        let fd: Int32
        var decoder: FrameDecoder
        let early: [JSONObject]
        /// What `setup` gave for this connection, sent after its welcome.
        let setup: [JSONObject]
        let heartbeat: Duration
        /// The largest frame the relay takes (its welcome says).
        let maxFrameBytes: Int
    }

    /// The interval the welcome gives (the client pings on the relay's interval, and
    /// takes three silent ones for a dead relay), kept within a sane range.
    static func heartbeat(of welcome: JSONObject) -> Duration {
        .seconds(min(max(welcome["heartbeatSeconds"]?.int ?? 15, 1), 3600))
    }

    /// Connects and completes hello; nil (state unavailable) when either fails.
    private func connectAndGreet() -> Greeted? {
        if let why = RelayDefaults.distrust(config.socketPath) {
            setState(.unavailable, error: .unavailable(why))
            return nil
        }
        let fd = cs_connect_unix(config.socketPath)
        guard fd >= 0 else {
            setState(.unavailable, error: .unavailable(RelayDefaults.connectFailure(config.socketPath, error: errno)))
            return nil
        }
        var tv = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var hello: JSONObject = ["type": "hello", "id": "hello", "protocol": 1, "member": .string(config.member)]
        if !config.token.isEmpty { hello["token"] = .string(config.token) }  // none: the member of this Unix account
        if let session = config.session {
            hello["session"] = .string(session)
            if let resume = resumePoint() { hello["resume"] = .int(resume) }
        }
        // The topics go in the hello too (protocol.md: an extension), so that a replay passes
        // them even in a session the relay had forgotten; the subscribe is for other relays.
        let setup = setup()
        if let topics = setup.first(where: { $0["type"]?.string == "subscribe" })?["topics"] { hello["topics"] = topics }
        var decoder = FrameDecoder(maxFrameBytes: 64 << 20)
        guard write(fd, hello) else {
            Glibc.close(fd)
            setState(.unavailable, error: .unavailable("the relay closed the connection during hello"))
            return nil
        }
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline && !shared.withLock({ $0.closed }) {
            failExpired()  // a relay slow to welcome does not hold a request past its deadline
            guard readableUnlessWoken(fd, until: min(deadline, earliestDeadline() ?? deadline)) else { continue }
            guard let frames = read(fd, &decoder) else { break }
            for f in frames {
                if f["type"]?.string == "welcome" {
                    shared.withLock { $0.closedBecause = nil }
                    onWelcome(f)
                    setState(.ready)
                    let early = Array(frames.drop { $0["type"]?.string != "welcome" }.dropFirst())
                    return Greeted(
                        fd: fd, decoder: decoder, early: early, setup: setup, heartbeat: Self.heartbeat(of: f),
                        maxFrameBytes: Int(f["maxFrameBytes"]?.int ?? Int64(1 << 20)))
                }
                if f["type"]?.string == "error" {
                    let code = f["code"]?.string ?? "error"
                    let message = f["message"]?.string ?? ""
                    if code == "unauthorized" {
                        // The relay does not say whether the member exists; what it said as it
                        // closed the last connection tells this member why.
                        let hint =
                            switch shared.withLock({ $0.closedBecause }) {
                            case "tokenRotated"?: " (the member's token was rotated: use the new one)"
                            case "memberRemoved"?: " (the member was removed from its family)"
                            default: ""
                            }
                        let error = ClientError.unauthorized(message + hint)
                        shared.withLock { s in (s.refused, s.closed) = (true, true) }
                        setState(.refused, error: error)
                        failAll(error)
                    } else {
                        setState(.unavailable, error: .relay(code: code, message: message))
                    }
                    Glibc.close(fd)
                    return nil
                }
            }
        }
        Glibc.close(fd)
        setState(.unavailable, error: .unavailable("no welcome from the relay"))
        return nil
    }

    private func serve(_ greeted: Greeted) {
        let fd = greeted.fd
        var decoder = greeted.decoder
        for f in greeted.setup { _ = write(fd, withID(f, freshID())) }
        shared.withLock { s in for i in s.pending.indices { s.pending[i].sent = false } }
        var lastHeard = ContinuousClock.now
        var lastSent = ContinuousClock.now
        let heartbeat = greeted.heartbeat
        handle(greeted.early, fd)
        while true {
            // Send what is waiting: new or unanswered requests, extra frames, and the ack if
            // they can carry it, it is due, or the connection is closing.
            var tooLarge: [Pending] = []
            let (toSend, closed, ackDue) = shared.withLock { s -> ([JSONObject], Bool, ContinuousClock.Instant?) in
                var out: [JSONObject] = s.extraFrames
                s.extraFrames.removeAll()
                // A request larger than the relay takes would only close the connection, again
                // at every resend: it fails at once, as the relay's error would have said.
                s.pending.removeAll { p in
                    guard !p.sent, p.size > greeted.maxFrameBytes else { return false }
                    tooLarge.append(p)
                    return true
                }
                // Once closed, no new request goes out, but a subscription and an ack still do.
                for i in s.pending.indices where !s.pending[i].sent && !s.closed {
                    s.pending[i].sent = true
                    var frame = s.pending[i].frame
                    // Sent on a connection that went before its reply came: the relay may have
                    // it. Resent, an ask must not open again a question cancelled or expired
                    // meanwhile (protocol.md).
                    if s.pending[i].sentBefore && frame["type"]?.string == "ask" { frame["resend"] = true }
                    s.pending[i].sentBefore = true
                    out.append(frame)
                }
                if let a = s.ackToSend, !out.isEmpty || s.closed || s.ackDue.map({ $0 <= .now }) ?? true {
                    out.append(["type": "ack", "seq": .int(a)])
                    (s.ackToSend, s.ackDue) = (nil, nil)
                }
                return (out, s.closed, s.ackDue)
            }
            for p in tooLarge {
                let why =
                    "the request is \(p.size) bytes, and the relay takes frames of \(greeted.maxFrameBytes) at most (its maxFrameBytes)"
                p.continuation.resume(returning: ["type": "error", "re": .string(p.id), "code": "frameTooLarge", "message": .string(why)])
            }
            if !toSend.isEmpty {
                guard write(fd, toSend) else { return }
                lastSent = .now
            }
            if closed { return }
            failExpired()
            let now = ContinuousClock.now
            if now - lastHeard > heartbeat * 3 { return }
            if now - lastSent > heartbeat {
                guard write(fd, ["type": "ping"]) else { return }
                lastSent = now
            }
            let nextDeadline = earliestDeadline()
            var wait = min(heartbeat, max(.zero, (lastSent + heartbeat) - now))
            if let d = nextDeadline { wait = min(wait, max(.zero, d - now)) }
            if let d = ackDue { wait = min(wait, max(.zero, d - now)) }
            var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wakeFDs.read, events: Int16(POLLIN), revents: 0)]
            let ms = Self.pollTimeout(wait)
            let n = poll(&fds, 2, ms)
            if n < 0 && errno != EINTR { return }
            if fds[1].revents != 0 { drainWake() }
            if fds[0].revents != 0 {
                guard let frames = read(fd, &decoder) else { return }
                lastHeard = .now
                handle(frames, fd)
            }
        }
    }

    private func handle(_ frames: [JSONObject], _ fd: Int32) {
        for f in frames {
            if let re = f["re"]?.string {
                let p = shared.withLock { s -> Pending? in
                    s.lastError = nil  // the relay answers: what it said unasked before is past
                    guard let i = s.pending.firstIndex(where: { $0.id == re }) else { return nil }
                    return s.pending.remove(at: i)
                }
                p?.continuation.resume(returning: f)
                continue
            }
            switch f["type"]?.string {
            case "ping": _ = write(fd, ["type": "pong"])
            case "closing" where f["reason"]?.string == "sessionReplaced": shared.withLock { $0.replaced = true }
            // Why the relay is about to close the connection: why requests fail until the
            // client is connected again (`busy` while the relay cannot store, say).
            case "closing":
                let why = f["reason"]?.string ?? "no reason given"
                shared.withLock { s in
                    s.lastError = .unavailable("the relay closed the connection (\(why))")
                    s.closedBecause = why
                }
            case "error":
                let error = ClientError.relay(code: f["code"]?.string ?? "error", message: f["message"]?.string ?? "")
                shared.withLock { $0.lastError = error }
            case "pong": break
            default:
                if f["seq"] != nil { onEvent(f) }
            }
        }
    }

    /// `poll`'s timeout for a wait of `d`: whole milliseconds, rounded up, within Int32.
    private static func pollTimeout(_ d: Duration) -> Int32 {
        Int32(min(Double(Int32.max), max(0, (d / .milliseconds(1)).rounded(.up))))
    }

    private func earliestDeadline() -> ContinuousClock.Instant? {
        shared.withLock { $0.pending.map(\.deadline).min() }
    }

    private func failExpired() {
        let now = ContinuousClock.now
        let (expired, why) = shared.withLock { s -> ([Pending], ClientError) in
            let gone = s.pending.filter { $0.deadline <= now }
            s.pending.removeAll { $0.deadline <= now }
            return (gone, s.lastError ?? .unavailable("no reply from the relay in time"))
        }
        for p in expired {
            switch why {
            case .unauthorized, .unavailable, .relay: p.continuation.resume(throwing: why)
            default: p.continuation.resume(throwing: ClientError.unavailable("\(why)"))
            }
        }
    }

    private func failAll(_ error: ClientError) {
        let all = shared.withLock { s -> [Pending] in
            defer { s.pending.removeAll() }
            return s.pending
        }
        for p in all { p.continuation.resume(throwing: error) }
    }

    /// Waits out a reconnect delay, failing each request whose deadline comes meanwhile
    /// (a backoff of seconds must not hold a request seconds past its own); `close`, and
    /// unless `endedByRequests` is false a new request, end the wait at once.
    private func waitToReconnect(until end: ContinuousClock.Instant, endedByRequests: Bool = true) {
        while true {
            failExpired()
            let now = ContinuousClock.now
            guard now < end else { return }
            let wakeAt = min(end, earliestDeadline() ?? end)
            var fds = [pollfd(fd: wakeFDs.read, events: Int16(POLLIN), revents: 0)]
            let ms = Self.pollTimeout(wakeAt - now)
            if poll(&fds, 1, ms) > 0 {
                drainWake()
                if endedByRequests || shared.withLock({ $0.closed }) { return }
            }
        }
    }

    /// An id no other request of this connection has (§2).
    private func freshID() -> String {
        shared.withLock { s in
            defer { s.nextID += 1 }
            return "k\(s.nextID)"
        }
    }

    private func withID(_ f: JSONObject, _ id: String) -> JSONObject {
        var f = f
        f["id"] = .string(id)
        return f
    }

    private func write(_ fd: Int32, _ f: JSONObject) -> Bool { write(fd, [f]) }

    /// Writes `frames` in one go, so that the relay reads them (an ack with the request
    /// that carries it) at once.
    private func write(_ fd: Int32, _ frames: [JSONObject]) -> Bool {
        var bytes: [UInt8] = []
        for f in frames { bytes.append(bytes: f.frame) }
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + off, bytes.count - off, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return false }
            off += n
        }
        return true
    }

    /// Whether `fd` became readable by `deadline`; false also when a new request or
    /// `close` woke the thread first (the caller looks at its deadlines again).
    private func readableUnlessWoken(_ fd: Int32, until deadline: ContinuousClock.Instant) -> Bool {
        var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wakeFDs.read, events: Int16(POLLIN), revents: 0)]
        let ms = Self.pollTimeout(deadline - .now)
        guard poll(&fds, 2, ms) > 0 else { return false }
        if fds[1].revents != 0 { drainWake() }
        return fds[0].revents != 0
    }

    /// Reads what is available; nil when the connection ended.
    private func read(_ fd: Int32, _ decoder: inout FrameDecoder) -> [JSONObject]? {
        var buf = [UInt8](repeating: 0, count: 65536)
        let n = buf.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        if n == 0 { return nil }
        if n < 0 { return errno == EAGAIN || errno == EINTR ? [] : nil }
        decoder.append(buf[0..<n])
        var out: [JSONObject] = []
        while let e = decoder.next() {
            guard case .frame(let body) = e, let o = try? JSON.parse(body).object else { return nil }
            out.append(o)
        }
        return out
    }
}
