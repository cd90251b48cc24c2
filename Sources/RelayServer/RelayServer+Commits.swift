// Turns through the store: each turn's changes handed to the writer (or committed here
// when the writer is idle and the turn small), its frames released once committed, a
// failed commit survived, and pruning passes run a bounded step at a time.

import CSystem
import RelayCore
import RelayHub
import RelayProtocol
import RelayStore

extension RelayServer {
    /// A turn's changes, as the writer has them, and what waits for their commit.
    struct Batch {
        /// The core's last take of changes in it (`RelayCore.takes`).
        var take: Int64
        /// Whether it changed anything (the hub's outbox, perhaps).
        var changed: Bool
        var outputs: [CoreOutput] = []
        /// Messages from the hub whose changes are in this batch (or an earlier one): the
        /// hub is told they are handled once it is committed.
        var hubAcks: [HubMessage] = []
        /// What admins changed (`RelayCore.takeNotes`), logged once it is committed.
        var notes: [String] = []
        /// Bytes of the replies in it for each connection (`Conn.unreleased`).
        var owed: [ConnectionID: Int] = [:]
    }

    /// Hands the turn's changes to the writer, holding its frames until they are committed;
    /// sends them now when it changed nothing and nothing waits to be committed. The writer
    /// takes every turn handed over while it committed the last into its next transaction
    /// (group commit), without waiting for the loop to collect the last one's outcome.
    func finishTurn() {
        let changes = relay.takeChanges()
        let notes = relay.takeNotes()
        let owed = turnOwed
        turnOwed.removeAll(keepingCapacity: true)
        guard !storeLost else {
            relay.drainOutputs { _ in }
            turnHubAcks.removeAll()
            return
        }
        var batch = Batch(take: relay.takes, changed: !changes.isEmpty, hubAcks: turnHubAcks, notes: notes, owed: owed)
        turnHubAcks.removeAll()
        relay.drainOutputs { batch.outputs.append($0) }
        if changes.isEmpty {
            guard let last = uncommitted.indices.last else { return release(batch) }
            // Behind the frames waiting for a commit, as they were queued.
            uncommitted[last].outputs += batch.outputs
            uncommitted[last].hubAcks += batch.hubAcks
            uncommitted[last].notes += batch.notes
            uncommitted[last].owed.merge(batch.owed, uniquingKeysWith: +)
            uncommitted[last].take = batch.take
        } else if changes.count <= Self.inlineCommitChanges && uncommitted.isEmpty && !pruneInFlight && committer.isIdle {
            // The writer is idle and the batch small: committed here, its replies go now,
            // without two threads waking each other for a commit of a few rows.
            do {
                try store.commit(changes)
                failedCommits = 0
                release(batch)
                store.finishCommits()
            } catch {
                commitFailed(error)
            }
        } else {
            uncommitted.append(batch)
            committer.submit(.commit(changes))
        }
    }

    /// Hands a pruning step to the writer when one is due: under load, one every 10 ms at
    /// most, as it takes the writer from commits (the store checks the cursors it has, so a
    /// step may go before a commit of newer ones).
    func submitPruneStep() {
        guard pruneWanted && !pruneInFlight, let pass = pruning, uncommitted.isEmpty || turnMillis - lastPruneStep >= 10 else {
            return
        }
        pruneWanted = false
        pruneInFlight = true
        lastPruneStep = turnMillis
        committer.submit(
            .prune(
                olderThan: pass.cutoff, acknowledged: pass.acknowledged, settledThrough: pass.settled,
                questionsKept: config.questionsKept, limit: Self.pruneStepRows))
    }

    /// A committed turn: its frames are sent, the hub told its messages are handled, and
    /// the bridge woken for what it may have added to the outbox.
    private func release(_ batch: Batch) {
        relay.committed(throughTake: batch.take)
        for n in batch.notes { log(.info, n) }
        dispatch(batch.outputs, owed: batch.owed)
        guard let bridge else { return }
        bridge.acknowledge(batch.hubAcks)
        if batch.changed { bridge.noteOutboxChanged() }
    }

    /// What the writer has done since the last call: turns committed are sent.
    func collectOutcomes() {
        for outcome in committer.takeOutcomes() {
            switch outcome {
            case .committed(let turns):
                failedCommits = 0
                assert(turns <= uncommitted.count, "an outcome for turns never handed over")
                let done = uncommitted.prefix(turns)
                uncommitted.removeFirst(done.count)
                for batch in done { release(batch) }
            case .commitFailed(let error):
                commitFailed(error)
            case .pruned(let step):
                pruneInFlight = false
                // Told to the core also when the pass was given up meanwhile (a failed commit).
                for (member, seq) in step.through {
                    relay.eventsDropped(member: member, through: seq)
                    if seq >= pruning?.acknowledged[member] ?? .max { pruning?.acknowledged[member] = nil }
                }
                guard pruning != nil else { continue }
                if step.more { pruneWanted = true } else { pruning = nil }
            case .pruneFailed(let error, let done):
                pruneInFlight = false
                pruning = nil
                for (member, seq) in done?.through ?? [:] { relay.eventsDropped(member: member, through: seq) }
                log(
                    .warning,
                    "could not prune old events or forget old questions (tried again in \(Int(config.pruneIntervalSeconds)) s): \(error)")
            }
        }
        submitPruneStep()
    }

    /// A commit failed (a full disk, say): nothing of its turns, nor of those handed over
    /// behind them, is sent. Every connection is told and closed (clients resend
    /// what was not acknowledged), new ones are refused for a while, and the core is
    /// rebuilt from what the store holds.
    func commitFailed(_ error: any Error) {
        failedCommits += 1
        if stopping { commitFailedWhileStopping = true }
        let pause = Self.refusalAfterFailedCommits(failedCommits)
        refusingUntil = Self.monotonicMillis() + pause
        let full = (error as? SQLiteError)?.isFull == true
        commitFailure = full ? "out of disk space" : "\(error)"
        freeAtFullDisk = full ? config.dataDirectory.flatMap(config.diskSpace).map { Int64($0.available) } : nil
        log(
            .error,
            "could not commit to the store: \(error); nothing of it was sent, closing every connection so "
                + "clients resend, and refusing new ones for \(pause / 1000) s")
        uncommitted.removeAll()
        turnHubAcks.removeAll()
        (pruning, pruneWanted) = (nil, false)
        relay.drainOutputs { _ in }
        _ = relay.takeChanges()
        _ = relay.takeNotes()
        turnOwed.removeAll()
        for c in touched { c.touched = false }
        touched.removeAll(keepingCapacity: true)
        let notice = RequestError(
            .busy, "the relay could not store changes (\(commitFailure)); nothing since its last reply was kept, send it again later"
        ).frame(re: nil).frame
        for (id, c) in conns {
            // After the frames still waiting to go (one may be half sent), as far as the socket takes them.
            c.out.append(bytes: notice)
            _ = c.out.withUnsafeBytes { cs_send(c.fd, $0.baseAddress! + c.outStart, c.pendingBytes) }
            closeNow(id)
        }
        do {
            let rebuilt = RelayCore(config: coreConfig, snapshot: try store.load(), archive: archive, now: config.wallClock())
            rebuilt.carryOver(from: relay)
            relay = rebuilt
            committer.resume()
        } catch {
            log(.error, "could not reload the store: \(error); stopping")
            stopping = true
            storeLost = true
        }
    }

    /// How long new connections are refused after the `n`th failed commit in a row, in
    /// milliseconds: one second, doubling up to 4, so that a relay whose disk was full
    /// takes changes again within seconds of space being freed.
    private static func refusalAfterFailedCommits(_ n: Int) -> Int64 { 1000 << Int64(min(max(n, 1) - 1, 2)) }

    /// Every `pruneIntervalSeconds` a pass starts: events past the retention window, and
    /// those every durable session of their member has acknowledged (with the cursors
    /// that say so committed first), go a bounded step at a time, through the writer,
    /// until none is left.
    func prune(now: Timestamp) {
        guard pruning == nil, Double(turnMillis - lastPrune) >= config.pruneIntervalSeconds * 1000 else { return }
        lastPrune = turnMillis
        checkDiskSpace()
        relay.flushCursors()
        lastCursorFlush = turnMillis
        // Events appended within two cursor flushes may yet be acknowledged in the store: a
        // later pass takes them, rather than this one keeping them (indexing them, in SQLite).
        // Told by position, and timed on the monotonic clock: a wall clock set back or
        // forward neither holds every event back nor lets young ones through.
        let settling = Int64(config.cursorFlushSeconds * 2000) + 500
        positions.append((turnMillis, store.eventPosition))
        let settledIndex = positions.lastIndex { turnMillis - $0.at >= settling }
        let settled = settledIndex.map { positions[$0].position } ?? 0
        if let settledIndex { positions.removeFirst(settledIndex) }
        pruning = (
            Timestamp(milliseconds: now.milliseconds - coreConfig.retentionSeconds * 1000), relay.acknowledgedByAllSessions(), settled
        )
        pruneWanted = true
    }

    /// Warns while the data directory's file system is low on space (every ten minutes),
    /// and says when it has room again.
    func checkDiskSpace() {
        guard let dir = config.dataDirectory, let space = config.diskSpace(dir) else { return }
        if space.isLow {
            if let last = lowDiskWarned, turnMillis - last < 600_000 { return }
            lowDiskWarned = turnMillis
            log(
                .warning,
                "the data directory's file system has \(DiskSpace.shown(space.available)) free of \(DiskSpace.shown(space.total));"
                    + " once it is full the relay cannot take changes (each one fails, and clients reconnect and resend):"
                    + " free some space, or move --data")
        } else if lowDiskWarned != nil {
            lowDiskWarned = nil
            log(.info, "the data directory's file system has room again (\(DiskSpace.shown(space.available)) free)")
        }
    }
}
