// A connection to a family hub: a NATS server with JetStream, through the system's
// libnats. It publishes with an id the hub deduplicates on (a resend after a lost ack is
// told apart from a new message), can make a publish the first on its subject or none
// (first answer wins, for every device alike), and reads through durable consumers
// whose messages are acknowledged one by one once they are safely stored.
//
// libnats reconnects by itself, forever, and is safe to use from several threads.

import CNATS
import Foundation
import Glibc
import Synchronization

/// A failure of the hub or of the link to it, with libnats' text and JetStream's code.
public struct HubError: Error, Sendable, CustomStringConvertible {
    /// libnats' status (`NATS_…`).
    public let status: Int32
    /// JetStream's error code (e.g. 10071, wrong last sequence), 0 for none.
    public let code: Int32
    public let message: String
    public var description: String { code != 0 ? "\(message) (JetStream error \(code))" : message }

    init(_ s: natsStatus, _ code: jsErrCode, text: String) {
        status = Int32(bitPattern: s.rawValue)
        self.code = Int32(bitPattern: code.rawValue)
        message = text
    }

    init(_ s: natsStatus, _ code: jsErrCode = jsErrCode(rawValue: 0), _ what: String) {
        status = Int32(bitPattern: s.rawValue)
        self.code = Int32(bitPattern: code.rawValue)
        var detail = String(cString: natsStatus_GetText(s))
        var last = NATS_OK
        // libnats' last error says more, when it has words for this status (it may be empty).
        if let text = nats_GetLastError(&last), last == s, text.pointee != 0 { detail = String(cString: text) }
        message = "\(what): \(detail)"
    }

    /// The hub does not trust these credentials (a device removed, or paired elsewhere).
    public var isRefused: Bool {
        status == Int32(bitPattern: NATS_CONNECTION_AUTH_FAILED.rawValue) || message.contains("Authorization Violation")
    }

    /// The family's stream is not on the hub (it lost its store, say): a publish finds
    /// nothing to store it in, a consumer nothing to read.
    public var isStreamMissing: Bool { isStreamNotFound || status == Int32(bitPattern: NATS_NO_RESPONDERS.rawValue) }

    /// The hub says it has no such stream (not merely that nothing answered, as while
    /// JetStream starts).
    public var isStreamNotFound: Bool { code == Int32(bitPattern: JSStreamNotFoundErr.rawValue) }

    /// The link is down or the hub did not answer in time: a later try may succeed.
    public var isUnreachable: Bool {
        [NATS_TIMEOUT, NATS_NO_RESPONDERS, NATS_CONNECTION_CLOSED, NATS_NO_SERVER, NATS_STALE_CONNECTION, NATS_CONNECTION_DISCONNECTED]
            .contains { Int32(bitPattern: $0.rawValue) == status }
    }
}

/// What the hub did with a publish.
public enum Published: Equatable, Sendable {
    /// Stored at this sequence of the stream.
    case stored(UInt64)
    /// A message with the same id was stored before (at this sequence): nothing new.
    case duplicate(UInt64)
    /// Another message was first on the subject (`firstOnSubject`): nothing stored.
    case notFirst
}

/// A family's stream on the hub.
public struct HubStream: Sendable {
    public var name: String
    public var subjects: [String]
    /// How long the hub remembers message ids to drop resends (in seconds).
    public var duplicateWindowSeconds: Int64 = 24 * 3600
    /// How long messages are kept (in seconds; 0: for ever).
    public var maxAgeSeconds: Int64 = 0

    public init(name: String, subjects: [String]) {
        self.name = name
        self.subjects = subjects
    }
}

/// A message to publish: see `HubConnection.publish(_:id:body:headers:firstOnSubject:)`.
public struct HubPublication: Sendable {
    public var subject: String
    public var id: String
    public var body: [UInt8]
    public var firstOnSubject: Bool

    public init(subject: String, id: String, body: [UInt8], firstOnSubject: Bool) {
        self.subject = subject
        self.id = id
        self.body = body
        self.firstOnSubject = firstOnSubject
    }
}

public final class HubConnection: @unchecked Sendable {
    private var connection: OpaquePointer?
    fileprivate var jetStream: OpaquePointer?
    /// What the hub said of each message published by `publish(_:)`, by id, as libnats
    /// hands it over on its own thread.
    private let outcomes = PublishOutcomes()
    /// How long a request to the hub may take.
    let timeoutMillis: Int64

    /// Told when the link goes down or comes back (on libnats' thread). libnats may call it
    /// after the connection is destroyed (its callbacks are queued to a thread of its own):
    /// it is disarmed then, and never freed (a few bytes a connection made).
    private var linkWatch: LinkWatch?

    /// Connects to `url` (`nats://host:port`); `name` is how the hub lists this client,
    /// `credentials` the NATS credentials file it proves who it is with (a hub in operator
    /// mode). Once connected, a lost link is retried for ever in the background; requests
    /// made meanwhile fail with an error that `isUnreachable`. `onLinkChange` is called (on
    /// a thread of libnats) when the link goes down, comes back, or closes for good.
    public init(
        url: String, name: String, credentials: String? = nil, timeoutMillis: Int64 = 5000, onLinkChange: (@Sendable () -> Void)? = nil
    ) throws(HubError) {
        self.timeoutMillis = timeoutMillis
        var opts: OpaquePointer?
        try Self.check(natsOptions_Create(&opts), "cannot set up a connection")
        defer { natsOptions_Destroy(opts) }
        let shown = Self.redacted(url)
        try Self.check(natsOptions_SetURL(opts, url), "\(shown) is not a hub address")
        try Self.check(natsOptions_SetName(opts, name), "cannot name the connection")
        try Self.check(natsOptions_SetMaxReconnect(opts, -1), "cannot set reconnects")
        try Self.check(natsOptions_SetReconnectWait(opts, 250), "cannot set reconnects")
        // A link that died silently is noticed within three pings.
        try Self.check(natsOptions_SetPingInterval(opts, 5000), "cannot set pings")
        try Self.check(natsOptions_SetTimeout(opts, timeoutMillis), "cannot set the timeout")
        if let credentials {
            try Self.check(natsOptions_SetUserCredentialsFromFiles(opts, credentials, nil), "cannot use the credentials \(credentials)")
        }
        if let onLinkChange {
            let watch = LinkWatch(onLinkChange)
            linkWatch = watch
            let changed: natsConnectionHandler = { _, closure in Unmanaged<LinkWatch>.fromOpaque(closure!).takeUnretainedValue().changed() }
            let pointer = Unmanaged.passRetained(watch).toOpaque()  // for libnats, for ever
            for set in [natsOptions_SetDisconnectedCB, natsOptions_SetReconnectedCB, natsOptions_SetClosedCB] {
                try Self.check(set(opts, changed, pointer), "cannot watch the link")
            }
        }
        // libnats 3.4.1 leaves the signature out of its CONNECT when the signature's first
        // byte is zero (fixed in nats.c 3.8), so the hub refuses one connect in 256 made
        // with credentials. Each try signs a new nonce: a refusal counts once it repeats.
        var connected = natsConnection_Connect(&connection, opts)
        for _ in 1..<3 where credentials != nil && connected == NATS_CONNECTION_AUTH_FAILED {
            connected = natsConnection_Connect(&connection, opts)
        }
        try Self.check(connected, "cannot connect to the hub at \(shown)")
        var jsOpts = jsOptions()
        jsOptions_Init(&jsOpts)
        jsOpts.Wait = timeoutMillis
        jsOpts.PublishAsync.MaxPending = 1024
        jsOpts.PublishAsync.AckHandlerClosure = Unmanaged.passUnretained(outcomes).toOpaque()
        jsOpts.PublishAsync.AckHandler = { _, msg, ack, failure, closure in
            Unmanaged<PublishOutcomes>.fromOpaque(closure!).takeUnretainedValue().record(msg, ack, failure)
            natsMsg_Destroy(msg)
        }
        let s = natsConnection_JetStream(&jetStream, connection, &jsOpts)
        guard s == NATS_OK else {
            natsConnection_Destroy(connection)
            connection = nil  // deinit runs too
            throw HubError(s, jsErrCode(rawValue: 0), "the hub at \(shown) has no JetStream")
        }
    }

    /// `url` (one address, or several separated by commas) without a user and password,
    /// for messages and logs.
    public static func redacted(_ url: String) -> String {
        url.split(separator: ",", omittingEmptySubsequences: false).map { address -> String in
            guard let scheme = address.firstRange(of: "://"), let at = address.lastIndex(of: "@"), at > scheme.upperBound else {
                return String(address)
            }
            return String(address[..<scheme.upperBound]) + "…" + String(address[at...])
        }.joined(separator: ",")
    }

    deinit {
        jsCtx_Destroy(jetStream)
        linkWatch?.disarm()
        natsConnection_Destroy(connection)
    }

    /// Whether the link is up now.
    public var isConnected: Bool { natsConnection_Status(connection) == NATS_CONN_STATUS_CONNECTED }

    /// Whether the link is closed for good (libnats gives up after the hub refused it).
    public var isClosed: Bool { natsConnection_IsClosed(connection) }

    /// Makes `stream` unless the hub has it.
    public func ensureStream(_ stream: HubStream) throws(HubError) {
        var code = jsErrCode(rawValue: 0)
        var info: UnsafeMutablePointer<jsStreamInfo>?
        let found = js_GetStreamInfo(&info, jetStream, stream.name, nil, &code)
        if found == NATS_OK {
            jsStreamInfo_Destroy(info)
            return
        }
        guard code == JSStreamNotFoundErr else { throw HubError(found, code, "cannot look up stream \(stream.name)") }
        var config = jsStreamConfig()
        jsStreamConfig_Init(&config)
        let made: natsStatus = stream.name.withCString { name in
            withCStrings(stream.subjects) { subjects in
                config.Name = name
                config.Subjects = subjects.baseAddress
                config.SubjectsLen = Int32(subjects.count)
                config.Storage = js_FileStorage
                config.Duplicates = stream.duplicateWindowSeconds * 1_000_000_000
                config.MaxAge = stream.maxAgeSeconds * 1_000_000_000
                config.DenyDelete = true
                config.DenyPurge = true
                code = jsErrCode(rawValue: 0)
                var made: UnsafeMutablePointer<jsStreamInfo>?
                let s = js_AddStream(&made, jetStream, &config, nil, &code)
                jsStreamInfo_Destroy(made)
                return s
            }
        }
        // Made meanwhile, by another device or another thread (a family's account holds one stream).
        if made != NATS_OK, js_GetStreamInfo(&info, jetStream, stream.name, nil, nil) == NATS_OK {
            jsStreamInfo_Destroy(info)
            return
        }
        try Self.check(made, code, "cannot make stream \(stream.name)")
    }

    /// Publishes `body` on `subject` under `id` (a resend of the same id is a `duplicate`),
    /// with `headers`; with `firstOnSubject`, only if nothing was published on the subject
    /// before (`notFirst` otherwise). Returns once the hub has stored it.
    public func publish(
        _ subject: String, id: String, body: [UInt8], headers: [String: String] = [:], firstOnSubject: Bool = false
    ) throws(HubError) -> Published {
        var msg: OpaquePointer?
        let created = body.withUnsafeBytes { natsMsg_Create(&msg, subject, nil, $0.baseAddress, Int32($0.count)) }
        try Self.check(created, "cannot make a message for \(subject)")
        defer { natsMsg_Destroy(msg) }
        for (key, value) in headers.sorted(by: { $0.key < $1.key }) {
            try Self.check(natsMsgHeader_Set(msg, key, value), "cannot set header \(key)")
        }
        var options = jsPubOptions()
        jsPubOptions_Init(&options)
        options.MaxWait = timeoutMillis
        options.ExpectNoMessage = firstOnSubject
        var code = jsErrCode(rawValue: 0)
        var ack: UnsafeMutablePointer<jsPubAck>?
        let s = id.withCString { id in
            options.MsgId = id
            return js_PublishMsg(&ack, jetStream, msg, &options, &code)
        }
        defer { jsPubAck_Destroy(ack) }
        if s != NATS_OK && code == JSStreamWrongLastSequenceErr { return .notFirst }
        try Self.check(s, code, "the hub did not store \(subject)")
        guard let a = ack?.pointee else { throw HubError(NATS_ERR, code, "the hub gave no acknowledgement for \(subject)") }
        return a.Duplicate ? .duplicate(a.Sequence) : .stored(a.Sequence)
    }

    /// A plain NATS request (no JetStream): the reply's body.
    public func request(_ subject: String, body: [UInt8]) throws(HubError) -> [UInt8] {
        var reply: OpaquePointer?
        let s = body.withUnsafeBytes { natsConnection_Request(&reply, connection, subject, $0.baseAddress, Int32($0.count), timeoutMillis) }
        try Self.check(s, "no answer from the hub to \(subject)")
        defer { natsMsg_Destroy(reply) }
        let n = Int(natsMsg_GetDataLength(reply))
        return n == 0 ? [] : Array(UnsafeRawBufferPointer(start: natsMsg_GetData(reply), count: n))
    }

    /// Publishes `messages` one after the other without waiting for each: the hub stores
    /// them in order. Returns each one's outcome, in order, once all are known or the
    /// connection's timeout has passed (those not known by then are `isUnreachable`).
    public func publish(_ messages: [HubPublication]) -> [Result<Published, HubError>] {
        outcomes.reset()
        var failed: [String: HubError] = [:]
        for m in messages {
            var msg: OpaquePointer?
            let created = m.body.withUnsafeBytes { natsMsg_Create(&msg, m.subject, nil, $0.baseAddress, Int32($0.count)) }
            guard created == NATS_OK else {
                failed[m.id] = HubError(created, jsErrCode(rawValue: 0), "cannot make a message for \(m.subject)")
                continue
            }
            var options = jsPubOptions()
            jsPubOptions_Init(&options)
            options.ExpectNoMessage = m.firstOnSubject
            let s = m.id.withCString { id in
                options.MsgId = id
                return js_PublishMsgAsync(jetStream, &msg, &options)
            }
            natsMsg_Destroy(msg)  // nil (a no-op) once libnats took it
            if s != NATS_OK { failed[m.id] = HubError(s, jsErrCode(rawValue: 0), "cannot send \(m.subject)") }
        }
        // Out now: libnats otherwise leaves them to a flusher that waits a millisecond to
        // gather more (a batch is gathered already). The round trip this takes overlaps
        // the wait for the hub's acknowledgements, which follows.
        _ = natsConnection_FlushTimeout(connection, timeoutMillis)
        var wait = jsPubOptions()
        jsPubOptions_Init(&wait)
        wait.MaxWait = timeoutMillis
        if js_PublishAsyncComplete(jetStream, &wait) != NATS_OK {
            // Those still unanswered are taken back: an answer coming later is dropped.
            var pending = natsMsgList()
            if js_PublishAsyncGetPendingList(&pending, jetStream) == NATS_OK { natsMsgList_Destroy(&pending) }
        }
        let known = outcomes.take()
        return messages.map { m in
            if let error = failed[m.id] { return .failure(error) }
            return known[m.id]
                ?? .failure(HubError(NATS_TIMEOUT, jsErrCode(rawValue: 0), text: "the hub did not acknowledge \(m.subject) in time"))
        }
    }

    /// The last message on `subject` in `stream`, or nil when there is none.
    public func lastMessage(stream: String, subject: String) throws(HubError) -> HubMessage? {
        var msg: OpaquePointer?
        var code = jsErrCode(rawValue: 0)
        let s = js_GetLastMsg(&msg, jetStream, stream, subject, nil, &code)
        if s == NATS_NOT_FOUND || code == JSNoMessageFoundErr { return nil }
        try Self.check(s, code, "cannot read the last message on \(subject)")
        return HubMessage(msg!, acknowledgeable: false, owner: self)
    }

    /// Reads `stream`'s messages on `filter` (a subject, wildcards allowed) through the
    /// durable consumer `durable`, made on the hub unless it is there: it remembers across
    /// connections what was acknowledged, and hands again what was not, after
    /// `redeliverAfterMillis`. The hub sends each message as it comes; `onMessage` gets it
    /// on a thread of libnats, in order. Reading stops when the subscription goes.
    public func subscribe(
        stream: String, durable: String, filter: String, redeliverAfterMillis: Int64 = 30_000,
        onMessage: @escaping @Sendable (HubMessage) -> Void
    ) throws(HubError) -> HubSubscription {
        let delivery = Delivery(onMessage)
        var subscription: OpaquePointer?
        var code = jsErrCode(rawValue: 0)
        var subOptions = jsSubOptions()
        jsSubOptions_Init(&subOptions)
        // libnats may call the handler after the subscription is destroyed (its messages
        // queue on a thread of its own): the delivery is disarmed then, and never freed.
        let pointer = Unmanaged.passRetained(delivery).toOpaque()
        let handler: natsMsgHandler = { _, _, msg, closure in
            Unmanaged<Delivery>.fromOpaque(closure!).takeUnretainedValue().deliver(msg!)
        }
        // A subscription of this consumer just gone (this device's last connection) leaves
        // it bound on the hub for a moment: tried again for up to the connection's timeout.
        let deadline = ContinuousClock.now + .milliseconds(timeoutMillis)
        var s: natsStatus
        repeat {
            code = jsErrCode(rawValue: 0)
            s = stream.withCString { streamName in
                durable.withCString { durableName in
                    subOptions.Stream = streamName
                    subOptions.Config.Durable = durableName
                    subOptions.Config.AckPolicy = js_AckExplicit
                    subOptions.Config.DeliverPolicy = js_DeliverAll
                    subOptions.Config.AckWait = redeliverAfterMillis * 1_000_000
                    // The relay acknowledges as it commits: what waits for that bounds nothing but memory.
                    subOptions.Config.MaxAckPending = 65536
                    subOptions.ManualAck = true
                    return js_Subscribe(&subscription, jetStream, filter, handler, pointer, nil, &subOptions, &code)
                }
            }
            guard s != NATS_OK, HubError(s, code, "").message.contains("already bound"), ContinuousClock.now < deadline else { break }
            usleep(50_000)
        } while true
        guard s == NATS_OK, let subscription else {
            delivery.disarm()
            throw HubError(s, code, "cannot read \(filter) from \(stream) as \(durable)")
        }
        let made = HubSubscription(subscription, delivery: delivery, connection: self, stream: stream, durable: durable)
        delivery.arm(made)
        return made
    }

    static func check(_ s: natsStatus, _ what: @autoclosure () -> String) throws(HubError) {
        guard s == NATS_OK else { throw HubError(s, jsErrCode(rawValue: 0), what()) }
    }

    static func check(_ s: natsStatus, _ code: jsErrCode, _ what: @autoclosure () -> String) throws(HubError) {
        guard s == NATS_OK else { throw HubError(s, code, what()) }
    }
}

/// A durable consumer's subscription: messages come to its handler until it goes.
public final class HubSubscription: @unchecked Sendable {
    private let subscription: OpaquePointer
    private let delivery: Delivery
    /// libnats' subscription lives inside its connection: kept until the subscription goes.
    private let connection: HubConnection
    private let stream: String
    private let durable: String

    init(_ subscription: OpaquePointer, delivery: Delivery, connection: HubConnection, stream: String, durable: String) {
        self.subscription = subscription
        self.delivery = delivery
        self.connection = connection
        self.stream = stream
        self.durable = durable
    }

    deinit {
        delivery.disarm()
        natsSubscription_Destroy(subscription)
    }

    /// What the hub says of this subscription's consumer: nil when it is gone (a hub that
    /// lost it); `bound` false when it sends to no one (the interest lost on the way). The
    /// hub sends such a subscription nothing, and says nothing of it: made anew, it takes
    /// up where the consumer's acknowledgements left off. `waiting`: the messages it holds
    /// for this device that are not acknowledged yet (sent or not).
    public func consumer() throws(HubError) -> (bound: Bool, waiting: Int)? {
        var info: UnsafeMutablePointer<jsConsumerInfo>?
        var code = jsErrCode(rawValue: 0)
        // By name: libnats (3.4) knows a subscription's consumer only if it made it, not
        // one it bound to (this device's, made before), and refuses to ask of it.
        let s = js_GetConsumerInfo(&info, connection.jetStream, stream, durable, nil, &code)
        defer { jsConsumerInfo_Destroy(info) }
        if s != NATS_OK && code == JSConsumerNotFoundErr { return nil }
        try HubConnection.check(s, code, "cannot ask the hub about a consumer")
        guard let c = info?.pointee else { return nil }
        return (c.PushBound, Int(c.NumPending) + Int(c.NumAckPending))
    }
}

/// Hands a subscription's messages on, each holding the subscription (its acknowledgement
/// goes through it); disarmed once the subscription goes.
final class Delivery: @unchecked Sendable {
    private let lock = NSLock()
    private var handler: (@Sendable (HubMessage) -> Void)?
    private weak var subscription: HubSubscription?
    /// What came before the subscription was handed over (the hub sends at once).
    private var early: [OpaquePointer] = []

    init(_ handler: @escaping @Sendable (HubMessage) -> Void) { self.handler = handler }

    func arm(_ subscription: HubSubscription) {
        lock.withLock {
            self.subscription = subscription
            for msg in early { handler?(HubMessage(msg, acknowledgeable: true, owner: subscription)) }
            early = []
        }
    }

    func disarm() {
        lock.withLock {
            handler = nil
            subscription = nil
            for msg in early { natsMsg_Destroy(msg) }
            early = []
        }
    }

    func deliver(_ msg: OpaquePointer) {
        // Under the lock: a disarm waits for a delivery under way.
        lock.withLock {
            guard let handler else { return natsMsg_Destroy(msg) }  // gone: the hub hands it again
            guard let subscription else { return early.append(msg) }
            handler(HubMessage(msg, acknowledgeable: true, owner: subscription))
        }
    }
}

/// A message read from the hub.
public final class HubMessage: @unchecked Sendable {
    private let msg: OpaquePointer
    private let acknowledgeable: Bool
    public let subject: String
    public let body: [UInt8]
    /// Where it sits in its stream, how many times it was handed out (1 the first time),
    /// and when the hub stored it (nanoseconds since 1970, the hub's clock).
    public private(set) var streamSequence: UInt64 = 0
    public private(set) var deliveries: UInt64 = 0
    public private(set) var storedAtNanos: Int64 = 0

    /// What the message was read through (a consumer, a connection): its acknowledgement
    /// goes through that connection, which must outlive it.
    private let owner: AnyObject

    init(_ msg: OpaquePointer, acknowledgeable: Bool, owner: AnyObject) {
        self.msg = msg
        self.owner = owner
        self.acknowledgeable = acknowledgeable
        subject = String(cString: natsMsg_GetSubject(msg))
        let n = Int(natsMsg_GetDataLength(msg))
        body = n == 0 ? [] : Array(UnsafeRawBufferPointer(start: natsMsg_GetData(msg), count: n))
        var meta: UnsafeMutablePointer<jsMsgMetaData>?
        if acknowledgeable, natsMsg_GetMetaData(&meta, msg) == NATS_OK, let m = meta?.pointee {
            streamSequence = m.Sequence.Stream
            deliveries = m.NumDelivered
            storedAtNanos = m.Timestamp
        }
        jsMsgMetaData_Destroy(meta)
        if !acknowledgeable { streamSequence = natsMsg_GetSequence(msg) }
    }

    deinit { natsMsg_Destroy(msg) }

    /// A header's value, or nil.
    public func header(_ key: String) -> String? {
        var value: UnsafePointer<CChar>?
        guard natsMsgHeader_Get(msg, key, &value) == NATS_OK, let value else { return nil }
        return String(cString: value)
    }

    /// Tells the hub this message is handled (stored where it had to go): it is not handed
    /// again. Does not wait for the hub to confirm: an acknowledgement lost on the way
    /// only means the message is handed again, and its second coming changes nothing.
    public func ack() throws(HubError) {
        guard acknowledgeable else { return }
        try HubConnection.check(natsMsg_Ack(msg, nil), "cannot acknowledge \(subject) to the hub")
    }
}

private final class LinkWatch: Sendable {
    private let action: Mutex<(@Sendable () -> Void)?>
    init(_ action: @escaping @Sendable () -> Void) { self.action = Mutex(action) }

    /// Runs the action, unless disarmed (under the lock: a disarm waits for a call under way).
    func changed() { action.withLock { $0?() } }

    func disarm() { action.withLock { $0 = nil } }
}

/// The outcomes of messages published without waiting, by their id (libnats' thread
/// records, the publishing thread takes).
private final class PublishOutcomes: @unchecked Sendable {
    private let lock = NSLock()
    private var byID: [String: Result<Published, HubError>] = [:]

    func reset() { lock.withLock { byID = [:] } }

    func take() -> [String: Result<Published, HubError>] { lock.withLock { byID } }

    func record(_ msg: OpaquePointer?, _ ack: UnsafeMutablePointer<jsPubAck>?, _ failure: UnsafeMutablePointer<jsPubAckErr>?) {
        var value: UnsafePointer<CChar>?
        guard natsMsgHeader_Get(msg, "Nats-Msg-Id", &value) == NATS_OK, let value else { return }
        let id = String(cString: value)
        let subject = msg.map { String(cString: natsMsg_GetSubject($0)) } ?? ""
        let outcome: Result<Published, HubError>
        if let a = ack?.pointee {
            outcome = .success(a.Duplicate ? .duplicate(a.Sequence) : .stored(a.Sequence))
        } else if let f = failure?.pointee, f.ErrCode == JSStreamWrongLastSequenceErr {
            outcome = .success(.notFirst)
        } else {
            let f = failure?.pointee
            let text = f?.ErrText.map { String(cString: $0) } ?? "no answer"
            outcome = .failure(
                HubError(f?.Err ?? NATS_ERR, f?.ErrCode ?? jsErrCode(rawValue: 0), text: "the hub did not store \(subject): \(text)"))
        }
        lock.withLock { byID[id] = outcome }
    }
}

/// Runs `body` with `strings` as an array of C strings that live for the call.
private func withCStrings<R>(_ strings: [String], _ body: (UnsafeMutableBufferPointer<UnsafePointer<CChar>?>) -> R) -> R {
    let copies = strings.map { strdup($0) }
    defer { for c in copies { free(c) } }
    var pointers = copies.map { UnsafePointer<CChar>($0) }
    return pointers.withUnsafeMutableBufferPointer { body($0) }
}
