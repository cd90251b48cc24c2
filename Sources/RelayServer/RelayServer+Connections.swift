// Connections' input and output: reads fed to the core as whole frames, replays in
// steps, timers, and the one way output is queued and written.

import CSystem
import Glibc
import RelayCore
import RelayProtocol

extension RelayServer {
    func read(_ id: ConnectionID, now: Timestamp) {
        guard let c = conns[id], c.closing == nil else { return }
        var budget = 1 << 20
        while budget > 0 {
            let n = scratch.withUnsafeMutableBytes { Glibc.read(c.fd, $0.baseAddress, $0.count) }
            if n > 0 {
                scratch.withUnsafeBytes { c.decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
                countInput(c)
                c.lastHeard = turnMillis
                c.pinged = false
                budget -= n
                if holdsEnoughInput(c) { break }
                // A short read has most likely drained the socket: the read that would say
                // so is saved (readiness is level-triggered, so anything left is reported again).
                if n < scratch.count { break }
                continue
            }
            if n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) { c.peerGone = true }
            break
        }
        process(c, now: now)
        if c.peerGone {
            relay.disconnected(id)
            closeNow(id)
        } else {
            setInterest(c)
        }
    }

    /// Feeds whole frames to the core, stopping while the session replays, and while the
    /// connection may take no more requests (`mayTakeRequests`; `resumeInput` goes on). The
    /// connection stays in `conns` meanwhile: the core's closes take effect at the dispatch.
    func process(_ c: Conn, now: Timestamp) {
        let id = c.id
        var whole = false
        relay.countedConnection = id
        defer {
            c.unreleased += relay.countedBytes
            turnOwed[id, default: 0] += relay.countedBytes
            relay.countedConnection = nil
            countHeld(c)
            countInput(c)  // what was taken as requests no longer counts
        }
        while relay.takesFrames(id) {
            guard mayTakeRequests(c, owedMeanwhile: relay.countedBytes) else {
                // Whole frames wait (a part after them is checked once they are taken).
                if !c.inputPaused {
                    c.inputPaused = true
                    pausedInput.append(c)
                }
                c.partSince = nil
                return
            }
            switch c.decoder.withNextFrame({ relay.receive(id, body: $0, now: now) }) {
            case .frame: whole = true
            case .violation(let code, let message): relay.framingViolation(id, code, message)
            case .incomplete:
                // After a whole frame the part held is the next frame's, begun in this read.
                c.partSince = c.decoder.bufferedCount == 0 ? nil : whole ? turnMillis : c.partSince ?? turnMillis
                return
            }
        }
        c.partSince = nil
    }

    /// The next step of each replay whose connection has room: its events from the store.
    /// None while a turn is with the writer: the frames of a step held for a commit do not
    /// count in the connection's unsent bytes, and steps taken meanwhile would pile up.
    func replaySteps(now: Timestamp) {
        guard !relay.replaying.isEmpty, uncommitted.isEmpty else { return }
        for id in relay.replaying {
            guard let c = conns[id], c.pendingBytes < replayLowWater, let (member, after) = relay.replayPosition(id) else {
                continue
            }
            let (limit, budget) = (coreConfig.replayBatch, coreConfig.replayBudgetBytes)
            do {
                let stored = try store.events(member: member, after: after, limit: limit, maxBytes: budget)
                // Cut short by its size, the step is not the store's last (as a full one is not).
                let cut = stored.reduce(0) { $0 + $1.frame.count } >= budget
                if let why = relay.continueReplay(id, stored: stored, limit: cut ? stored.count : limit) {
                    log(.error, "connection \(id): \(why)")
                }
            } catch {
                log(.error, "connection \(id): could not read \(member)'s stored events for its replay: \(error)")
                relay.replayFailed(id, "\(error)")
            }
            process(c, now: now)
        }
    }

    /// A replaying connection gets its next step once its unsent bytes fall below this.
    var replayLowWater: Int { min(65536, config.maxOutputBytes / 4) }

    func checkTimers() {
        let now = turnMillis
        // Connection timers need no finer grain than a quarter second; skip the scan in between.
        guard now - lastTimerScan >= 250 else { return }
        lastTimerScan = now
        logRefusals()
        checkSocketFile()
        let hb = Int64(coreConfig.heartbeatSeconds) * 1000
        let handshake = Int64(config.handshakeTimeoutSeconds * 1000)
        for (id, c) in conns {
            if let since = c.closingSince {
                // A peer that does not read its last frames is not waited for long.
                if now - since >= 2000 {
                    relay.disconnected(id)
                    closeNow(id)
                }
                continue
            }
            let silent = now - c.lastHeard
            if !relay.isEstablished(id) {
                if now - c.openedAt >= handshake { relay.drop(id, .handshakeTimeout) }
            } else if let since = c.partSince, now - since >= 3 * hb {
                // Bytes that trickle in keep a connection from being silent; a frame that
                // never ends would still hold its buffer (up to the largest frame) for good.
                // Checked first: a peer silent since part of a frame is told why it is closed.
                relay.framingViolation(id, .badFrame, "a frame stayed incomplete for \(3 * hb / 1000) s; closing")
            } else if silent >= 3 * hb {
                relay.drop(id, .heartbeatTimeout)
            } else if silent >= hb && !c.pinged {
                c.pinged = true
                enqueue(Self.pingFrame, to: c)
            }
        }
    }

    /// Queues and writes frames held for a commit; `owed`: the bytes of each connection's
    /// replies among them (`Batch.owed`), still owed until everything queued with them is sent.
    func dispatch(_ outputs: [CoreOutput], owed: [ConnectionID: Int] = [:]) {
        // A reply and the events it caused often go to one connection: looked up once.
        var lastID: ConnectionID = -1
        var last: Conn?
        for o in outputs {
            switch o {
            case .send(let id, let frame):
                if id != lastID { (lastID, last) = (id, conns[id]) }
                guard let c = last else { continue }
                enqueue(frame, to: c)
            case .close(let id, let reason):
                if id != lastID { (lastID, last) = (id, conns[id]) }
                guard let c = last else { continue }
                c.closing = reason
                c.closingSince = Self.monotonicMillis()
                touch(c)
            }
        }
        for (id, bytes) in owed where bytes > 0 {
            guard let c = conns[id] else { continue }
            c.unreleased -= bytes
            countHeld(c)
            c.repliesUnsent.append((end: c.queuedTotal, bytes: bytes))
            c.repliesUnsentBytes += bytes
        }
        flushTouched()
    }

    /// Whether a connection takes more requests, owed `owedMeanwhile` more than counted:
    /// while it is owed less than `inputPauseBytes`, and the replies held for a commit
    /// (`Conn.unreleased`) of its member's connections together, and of all, come to less
    /// than the limits on their unsent bytes. Those limits see a reply only once its commit
    /// is done: until then, many connections that send requests and never read could each
    /// be held up to `inputPauseBytes` of replies. Every commit lets go of what it held,
    /// so a connection waits for one commit at most.
    func mayTakeRequests(_ c: Conn, owedMeanwhile: Int = 0) -> Bool {
        guard c.owed + owedMeanwhile < inputPauseBytes else { return false }
        let uncounted = c.unreleased + owedMeanwhile - c.heldCounted
        let total = held.total + uncounted
        // A member holds no more than all do: its own tally is looked up only when that could matter.
        return total < config.maxTotalOutputBytes
            && (total < config.maxMemberOutputBytes || held[owner(of: c)] + uncounted < config.maxMemberOutputBytes)
    }

    /// The member whose session the connection is, as counted: "" until its hello succeeds
    /// (before it, nothing is held or unsent for it but the refusal that closes it).
    private func owner(of c: Conn) -> String {
        if let owner = c.owner { return owner }
        guard let member = relay.member(of: c.id) else { return "" }
        c.owner = member
        return member
    }

    /// Counts the replies held for the connection for its member and in all.
    func countHeld(_ c: Conn) {
        let delta = c.unreleased - c.heldCounted
        guard delta != 0 else { return }
        c.heldCounted = c.unreleased
        held.add(delta, for: owner(of: c))
    }

    /// Writes what was queued for each connection touched since the last call.
    func flushTouched() {
        // Last touched first: a request's reply is written before the events it causes, and
        // the others waiting for those (a guardian for a question, a child for its answer)
        // should not wait behind the requester's `ok`.
        for c in touched.reversed() {
            c.touched = false
            flush(c)
        }
        touched.removeAll(keepingCapacity: true)
    }

    private static let pingFrame = (["type": "ping"] as JSONObject).frame

    /// Queues bytes for a connection: the one way output is queued, so nothing queued
    /// waits unwritten (it is written at the end of this turn's dispatch).
    private func enqueue(_ bytes: [UInt8], to c: Conn) {
        guard !c.closed else { return }  // dropped earlier in this dispatch
        c.out.append(bytes: bytes)
        c.queuedTotal += bytes.count
        touch(c)
        // Counted as queued, not at the turn's end: a member's many connections that do not
        // read would otherwise each take a copy of every event before any is dropped.
        count(c)
        if tooMuchUnsent(c) != nil { flush(c) }
    }

    /// A connection owed this many bytes takes no more requests until it is owed less: a
    /// client that pipelines requests with large replies (lists) gets them one after
    /// another, as it reads, rather than all at once past its output limit. As much as
    /// leaves room under that limit for one more reply, the largest a list makes (3 MiB by
    /// default), so that a client that writes its requests before it reads their replies
    /// gets as far as it can.
    var inputPauseBytes: Int {
        max(replayLowWater, config.maxOutputBytes - coreConfig.listReplyBytes - coreConfig.maxFrameBytes)
    }

    /// While its requests wait (a replay, or `inputPaused`), a connection is read until it
    /// holds a frame's worth (`inputPauseBytes` when paused, if more): what it sends is seen
    /// (it is not silent), and what it holds is bounded.
    private func holdsEnoughInput(_ c: Conn) -> Bool {
        // While the others hold their budget, one holding more than a hello needs is read no
        // further: clients that announce large frames and never finish them, or pipeline
        // requests they never read the replies to, cannot make the relay hold a frame's
        // worth (or more) for each.
        let othersHold =
            c.greeted
            ? input - c.inputCounted >= config.maxInputBytes : handshakeInput - c.handshakeCounted >= config.maxHandshakeInputBytes
        if othersHold && c.decoder.bufferedCount > Self.helloBytes {
            if !c.heldForInput {
                c.heldForInput = true
                inputHeld.append(c)
            }
            return true
        }
        if c.inputPaused { return c.decoder.bufferedCount > max(coreConfig.maxFrameBytes, inputPauseBytes) }
        return c.decoder.bufferedCount > coreConfig.maxFrameBytes && relay.isReplaying(c.id)
    }

    /// More than any hello needs: what a connection may hold (and a read more) when the
    /// others together hold their budget (`maxHandshakeInputBytes`, `maxInputBytes`).
    static let helloBytes = 64 << 10

    /// Counts what a connection holds: in `handshakeInput` until its `hello` succeeds, in
    /// `input` after.
    func countInput(_ c: Conn) {
        if !c.greeted {
            c.greeted = relay.isEstablished(c.id)
            if c.greeted { handshakeEnded(c) }
        }
        let holds = c.decoder.bufferedCount
        let (before, after) = c.greeted ? (0, holds) : (holds, 0)
        if (before < c.handshakeCounted || after < c.inputCounted) && !inputHeld.isEmpty { inputFreed = true }
        handshakeInput += before - c.handshakeCounted
        c.handshakeCounted = before
        input += after - c.inputCounted
        c.inputCounted = after
    }

    /// Reads again the connections held back by the input budgets that now have room for
    /// them: their frames go on rather than time out.
    func rereadHeldInput() {
        inputFreed = false
        let waiting = inputHeld
        inputHeld.removeAll()
        for c in waiting {
            c.heldForInput = false
            // Those still over the budget are listed again by `setInterest`.
            if conns[c.id] === c { setInterest(c) }
        }
    }

    /// The connection is no longer another user's that has not said hello.
    private func handshakeEnded(_ c: Conn) {
        guard let user = c.handshakingUser else { return }
        c.handshakingUser = nil
        let left = handshaking[user, default: 1] - 1
        handshaking[user] = left > 0 ? left : nil
    }

    /// Takes up again the requests of connections that may take them now (`mayTakeRequests`).
    func resumeInput(now: Timestamp) {
        let waiting = pausedInput
        pausedInput.removeAll()
        for c in waiting where conns[c.id] === c {
            guard mayTakeRequests(c) else {
                pausedInput.append(c)
                continue
            }
            c.inputPaused = false
            process(c, now: now)
            setInterest(c)
        }
    }

    /// Marks a connection to be flushed at the end of the dispatch, once.
    private func touch(_ c: Conn) {
        guard !c.touched else { return }
        c.touched = true
        touched.append(c)
    }

    func flush(_ c: Conn) {
        guard !c.closed else { return }
        let id = c.id
        while c.pendingBytes > 0 {
            let n = c.out.withUnsafeBytes { cs_send(c.fd, $0.baseAddress! + c.outStart, c.pendingBytes) }
            if n > 0 {
                c.outStart += n
                c.sentTotal += n
                // A client that reads is alive: while its requests wait it cannot be heard
                // (its pings wait behind them), and is not taken for silent.
                if c.inputPaused { c.lastHeard = turnMillis }
                continue
            }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
            c.peerGone = true
            break
        }
        c.repliesSent()
        if c.outStart == c.out.count {
            c.out.removeAll(keepingCapacity: c.out.capacity <= 65536)
            c.outStart = 0
        } else if c.outStart > 65536 && c.outStart > c.out.count / 2 {
            c.out.removeFirst(c.outStart)
            c.outStart = 0
        }
        count(c)
        if c.peerGone || (c.closing != nil && c.pendingBytes == 0) {
            relay.disconnected(id)
            closeNow(id)
        } else if let why = tooMuchUnsent(c) {
            log(.warning, "connection \(id) holds \(c.pendingBytes) unsent bytes\(why); dropping it as a slow consumer")
            relay.disconnected(id)
            closeNow(id)
        } else {
            setInterest(c)
        }
    }

    /// Counts the connection's unsent bytes for its member and in all.
    func count(_ c: Conn) {
        let delta = c.pendingBytes - c.counted
        guard delta != 0 else { return }
        c.counted = c.pendingBytes
        unsent.add(delta, for: owner(of: c))
    }

    /// Why a connection that still holds unsent bytes holds too many, if it does.
    private func tooMuchUnsent(_ c: Conn) -> String? {
        guard c.pendingBytes > 0 else { return nil }
        if c.pendingBytes > config.maxOutputBytes { return "" }
        let owner = owner(of: c)
        if unsent[owner] > config.maxMemberOutputBytes { return ", and \(owner)'s connections \(unsent[owner]) together" }
        if unsent.total > config.maxTotalOutputBytes { return ", and all connections \(unsent.total) together" }
        return nil
    }

    func setInterest(_ c: Conn) {
        var want = cs_epollrdhup
        let holdReads = holdsEnoughInput(c)
        if c.closing == nil && !holdReads { want |= cs_epollin }
        if c.pendingBytes > 0 { want |= cs_epollout }
        guard want != c.interest else { return }
        cs_epoll_ctl(epfd, c.interest == 0 ? 0 : 1, c.fd, want, UInt64(c.id))
        c.interest = want
    }

    func closeNow(_ id: ConnectionID) {
        guard let c = conns.removeValue(forKey: id) else { return }
        c.closed = true
        log(.debug, "connection \(id) closed (\(c.closing?.rawValue ?? (c.peerGone ? "by the client" : "by the relay")))")
        c.out = []
        c.outStart = 0
        count(c)
        c.unreleased = 0  // its replies held for a commit are dropped at the dispatch
        countHeld(c)
        if (c.handshakeCounted > 0 || c.inputCounted > 0) && !inputHeld.isEmpty { inputFreed = true }
        handshakeInput -= c.handshakeCounted
        c.handshakeCounted = 0
        input -= c.inputCounted
        c.inputCounted = 0
        handshakeEnded(c)
        cs_epoll_ctl(epfd, 2, c.fd, 0, 0)
        Glibc.close(c.fd)
    }
}
