// The bridge to a family hub (serve --hub): two threads of its own beside the loop. One
// publishes the store's hub outbox in order (a message stays there until the hub has
// it; the loop is told, and forgets it); the other subscribes to each family's stream
// through a durable consumer of this device (the hub sends its messages as they come,
// handed to the loop) and sends the acknowledgements the loop gives it: each message is
// acknowledged only once what it changed is committed. The hub deduplicates resends
// by message id and hands again what was not acknowledged, so a kill of either side at
// any moment loses nothing and repeats nothing the core has not seen (it ignores what it
// knows).

import Foundation
import Glibc
import RelayHub
import RelayModel
import RelayStore
import Synchronization

final class HubBridge: @unchecked Sendable {
    enum Incoming {
        /// The outbox's message `id` is with the hub (or refused for good): it goes.
        case sent(Int64)
        /// A message of a family's stream.
        case message(HubMessage)
    }

    let url: String
    let credentials: String?
    let device: String
    /// The families linked (nil: all the store knows).
    let families: Set<String>?
    /// How long the hub keeps a family's messages: the relays' retention.
    let retentionSeconds: Int64
    private let outbox: HubOutboxReader
    private let log: Log
    /// Wakes the loop once something waits for it.
    let wakeup: WakePipe
    private let condition = NSCondition()
    private var incoming: [Incoming] = []
    private var toAcknowledge: [HubMessage] = []
    private var outboxChanged = true
    private var stopping = false
    private var connection: HubConnection?
    /// Held while a connection is being made (by one thread; the other waits), never
    /// together with `condition`, which the loop takes.
    private let linking = NSLock()
    /// The families whose stream this bridge made or found, and that since worked; under
    /// `ensuring`, never held through a call to the hub (the two threads may both make one:
    /// the second finds it made).
    private var streams: Set<String> = []
    private let ensuring = NSLock()
    /// The hub refused this device's credentials at the last try, and when (monotonic
    /// seconds): a device removed tries again every few seconds, not at every turn.
    private let refusedState = Mutex<(refused: Bool, at: Double)>((false, 0))
    /// Since when (monotonic seconds) the hub could not be reached, and when that was
    /// last logged: said once, then once a minute, not at every try.
    private let unreachable = Mutex<(since: Double, logged: Double)?>(nil)

    /// What the hub holds for this device and it has not taken yet, as of the last look
    /// (every 5 s while linked).
    private let inboxState = Mutex<Int?>(nil)
    var inbox: Int? { inboxState.withLock { $0 } }

    /// Whether the hub refused this device at the last try (removed, or paired elsewhere).
    var isRefused: Bool { refusedState.withLock { $0.refused } }
    private var threads = 0

    init(
        url: String, credentials: String?, device: String, families: Set<String>?, retentionSeconds: Int64, outbox: HubOutboxReader,
        log: Log
    ) throws {
        self.url = url
        self.credentials = credentials
        self.device = device
        self.families = families
        self.retentionSeconds = retentionSeconds
        self.outbox = outbox
        self.log = log
        wakeup = try WakePipe()
    }

    func start() {
        threads = 2
        let publishing = Thread { [self] in
            publish()
            ended()
        }
        publishing.name = "hub-out"
        publishing.start()
        let reading = Thread { [self] in
            read()
            ended()
        }
        reading.name = "hub-in"
        reading.start()
    }

    /// Stops both threads and waits for them (a fetch under way ends within its timeout).
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        while threads > 0 { condition.wait() }
        condition.unlock()
    }

    private func ended() {
        condition.lock()
        threads -= 1
        condition.broadcast()
        condition.unlock()
    }

    /// Whether the link to the hub is up now.
    var isConnected: Bool {
        condition.lock()
        let c = connection
        condition.unlock()
        return c?.isConnected ?? false
    }

    /// A commit may have added to the outbox.
    func noteOutboxChanged() {
        condition.lock()
        outboxChanged = true
        condition.broadcast()
        condition.unlock()
    }

    /// What came since the last call, for the loop.
    func take() -> [Incoming] {
        wakeup.drain()
        condition.lock()
        defer { condition.unlock() }
        defer { incoming.removeAll() }
        return incoming
    }

    /// Messages whose changes are committed: the hub may forget them for this device.
    func acknowledge(_ messages: [HubMessage]) {
        guard !messages.isEmpty else { return }
        condition.lock()
        toAcknowledge += messages
        condition.broadcast()
        condition.unlock()
    }

    private func hand(_ items: [Incoming]) {
        guard !items.isEmpty else { return }
        condition.lock()
        incoming += items
        condition.unlock()
        wakeup.wake()
    }

    private var isStopping: Bool {
        condition.lock()
        defer { condition.unlock() }
        return stopping
    }

    /// The connection, made on first use, again after it could not be made, and again
    /// once libnats gave it up (the hub refused it); otherwise it reconnects by itself.
    private func link() -> HubConnection? {
        linking.lock()
        defer { linking.unlock() }
        condition.lock()
        let made = connection
        condition.unlock()
        if let made, !made.isClosed { return made }
        let now = ProcessInfo.processInfo.systemUptime
        if refusedState.withLock({ $0.refused && now - $0.at < 5 }) { return nil }
        do {
            let c = try HubConnection(
                url: url, name: "permission-relay \(device)", credentials: credentials, timeoutMillis: 2000,
                onLinkChange: { [wakeup] in wakeup.wake() })
            log(.info, "linked to the family hub at \(HubConnection.redacted(url)) as \(device)")
            refusedState.withLock { $0 = (false, now) }
            unreachable.withLock { $0 = nil }
            condition.lock()
            connection = c
            condition.unlock()
            wakeup.wake()  // the loop learns the link is up
            return c
        } catch  where error.isRefused {
            // Said once: a removed device keeps serving its own apps, and tries again quietly.
            if !refusedState.withLock({ $0.refused }) {
                log(
                    .error,
                    "the family hub does not trust this device (\(error)): if it was removed, pair it again"
                        + " (permission-relay device add, then device join); meanwhile what it must send waits here")
            }
            refusedState.withLock { $0 = (true, now) }
            wakeup.wake()  // the loop learns why the link is down
            return nil
        } catch {
            let said = unreachable.withLock { state -> String? in
                guard let s = state else {
                    state = (now, now)
                    return "\(error); trying again (said again once a minute while it lasts)"
                }
                guard now - s.logged >= 60 else { return nil }
                state = (s.since, now)
                return "\(error), for \(Int(now - s.since)) s now; trying again"
            }
            if let said { log(.warning, said) }
            return nil
        }
    }

    /// Makes the family's stream on the hub unless this bridge did already (and it has
    /// not gone since: `streamMissing`).
    private func ensureStream(_ family: String, on hub: HubConnection) throws(HubError) {
        ensuring.lock()
        let known = streams.contains(family)
        ensuring.unlock()
        guard !known else { return }
        var stream = HubStream(name: HubNames.stream(family: family), subjects: [HubNames.all(family: family)])
        stream.maxAgeSeconds = retentionSeconds
        try hub.ensureStream(stream)
        ensuring.lock()
        streams.insert(family)
        ensuring.unlock()
    }

    /// After `error`, a family's stream may be gone from the hub (a hub that lost its
    /// store): it is looked up, and made anew, at the next try, not taken as there.
    private func streamMissing(after error: HubError, families: some Sequence<String>) {
        guard error.isStreamMissing else { return }
        ensuring.lock()
        streams.subtract(families)
        ensuring.unlock()
    }

    // MARK: - Out

    private func publish() {
        var after: Int64 = 0
        var backoff = 0.25
        while !isStopping {
            condition.lock()
            if !outboxChanged && !stopping { _ = condition.wait(until: Date().addingTimeInterval(1)) }
            outboxChanged = false
            condition.unlock()
            // While the link is down, nothing is handed to it (the client would hold it
            // and its acknowledgement would time out): the outbox keeps it meanwhile.
            guard let hub = link(), hub.isConnected else {
                pause(&backoff)
                noteOutboxChanged()
                continue
            }
            var sending: Set<String> = []
            do {
                while !isStopping {
                    let batch = try outbox.messages(after: after, limit: 256)
                    guard !batch.isEmpty else { break }
                    sending = Set(batch.map(\.family))
                    for family in sending { try ensureStream(family, on: hub) }
                    // Sent together, answered together: the hub stores them in order.
                    let results = hub.publish(
                        batch.map {
                            HubPublication(subject: $0.subject, id: $0.messageID, body: $0.body, firstOnSubject: $0.firstOnSubject)
                        })
                    var sent: [Incoming] = []
                    // Handed in order up to the first the hub may not have: it and those after go again.
                    defer { hand(sent) }
                    for (m, result) in zip(batch, results) {
                        switch result {
                        case .success(.notFirst):
                            // A decision that came second: the first one comes back to every device.
                            log(.debug, "\(m.messageID): another decision was first on the hub")
                        case .success: break
                        case .failure(let error) where error.isUnreachable || error.isStreamMissing: throw error
                        case .failure(let error):
                            // Refused for good (too large, say): it must not hold back what follows.
                            log(.error, "the family hub refused \(m.subject): \(error); it stays on this device")
                        }
                        sent.append(.sent(m.id))
                        after = m.id
                    }
                }
                backoff = 0.25
            } catch {
                if let error = error as? HubError { streamMissing(after: error, families: sending) }
                log(.warning, "could not send to the family hub: \(error); the outbox keeps it, trying again")
                pause(&backoff)
                noteOutboxChanged()
            }
        }
    }

    /// Drops the subscriptions whose consumer the hub lost or sends to no one (they are
    /// made anew), and notes what the hub holds for this device: unknown while a family
    /// is subscribed to anew.
    private func look(at subscriptions: inout [String: HubSubscription]) throws(HubError) {
        var waiting: Int? = 0
        for (family, s) in subscriptions {
            let consumer: (bound: Bool, waiting: Int)?
            do {
                consumer = try s.consumer()
            } catch  where error.isStreamNotFound {
                log(.warning, "the family hub no longer has \(family)'s stream (has it lost its store?); making it again")
                streamMissing(after: error, families: [family])
                consumer = nil
            }
            guard let c = consumer, c.bound else {
                log(.warning, "the family hub no longer sends \(family)'s messages to this device; subscribing again")
                subscriptions[family] = nil
                waiting = nil
                continue
            }
            waiting = waiting.map { $0 + c.waiting }
        }
        let changed = inboxState.withLock { before in
            defer { before = waiting }
            return before != waiting
        }
        if changed { wakeup.wake() }  // the loop reads it when woken
    }

    private func pause(_ backoff: inout Double) {
        condition.lock()
        if !stopping { _ = condition.wait(until: Date().addingTimeInterval(backoff)) }
        condition.unlock()
        backoff = min(backoff * 2, 1)
    }

    // MARK: - In

    private func read() {
        var subscriptions: [String: HubSubscription] = [:]
        var subscribedOn: ObjectIdentifier?
        var backoff = 0.25
        var lastLook = Date()
        while !isStopping {
            guard let hub = link(), hub.isConnected else {
                pause(&backoff)
                continue
            }
            // A connection made anew (the last one closed for good) reads through subscriptions of its own.
            if subscribedOn != ObjectIdentifier(hub) {
                subscriptions = [:]
                subscribedOn = ObjectIdentifier(hub)
            }
            var subscribing: String?
            do {
                condition.lock()
                let acks = toAcknowledge
                toAcknowledge = []
                condition.unlock()
                // An acknowledgement that cannot go (the link down, or the connection it
                // came through closed for good) is not kept: the hub hands the message
                // again, and its second coming changes nothing.
                var unsent = 0
                for m in acks where (try? m.ack()) == nil { unsent += 1 }
                if unsent > 0 { log(.debug, "\(unsent) acknowledgements to the hub could not go; those messages come again") }
                // A subscription the hub sends nothing to any more, and says nothing of, is
                // made anew: looked at every few seconds.
                if Date().timeIntervalSince(lastLook) > 5 {
                    lastLook = Date()
                    try look(at: &subscriptions)
                }
                for family in try outbox.families() where subscriptions[family] == nil && families?.contains(family) != false {
                    subscribing = family
                    try ensureStream(family, on: hub)
                    // What a relay killed before it stored (and acknowledged) comes again
                    // 5 s later: its restart does not wait the default 30 s for it.
                    subscriptions[family] = try hub.subscribe(
                        stream: HubNames.stream(family: family), durable: HubNames.consumer(device: device),
                        filter: HubNames.all(family: family), redeliverAfterMillis: 5000
                    ) { [weak self] m in self?.hand([.message(m)]) }
                }
                backoff = 0.25
                // The hub sends what comes; this thread waits for acknowledgements to
                // send, and looks for new families and a lost link each second.
                condition.lock()
                if toAcknowledge.isEmpty && !stopping { _ = condition.wait(until: Date().addingTimeInterval(1)) }
                condition.unlock()
            } catch {
                if let error = error as? HubError, let subscribing { streamMissing(after: error, families: [subscribing]) }
                log(.warning, "could not read from the family hub: \(error); trying again")
                pause(&backoff)
            }
        }
    }
}
