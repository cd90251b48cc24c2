// The SQLite store's event streams: batches of a member's consecutive events, one row
// each (see EventBatch), followed by those in the writer's hands, the backlog's and this
// turn's, in memory (found by a scan of their journaled bytes: only a resuming session
// reads them).

import RelayProtocol

extension SQLiteStore {
    public func events(member: String, after seq: Int64, limit: Int) throws -> [EventRecord] {
        var out: [EventRecord] = []
        // Every batch holds at least one event, so `limit` batches are enough.
        try db.run(
            "SELECT events FROM eventBatches WHERE member = ? AND lastSeq > ? ORDER BY lastSeq LIMIT ?",
            [.text(member), .int(seq), .int(Int64(limit))]
        ) { r in
            guard out.count < limit else { return }
            for e in try EventBatch.decode(r.blob(0), member: member) where e.seq > seq && out.count < limit {
                out.append(e)
            }
        }
        for e in try inMemory(member: member) where e.seq > (out.last?.seq ?? seq) {
            guard out.count < limit else { return out }
            out.append(e)
        }
        return out
    }

    public func oldestEventSeq(member: String) throws -> Int64? {
        let stored = try db.scalar("SELECT min(firstSeq) FROM eventBatches WHERE member = ?", [.text(member)])
        if let stored { return stored }
        return try inMemory(member: member).first?.seq
    }

    /// The events of `member` not yet in the tables, in order.
    private func inMemory(member: String) throws -> [EventRecord] {
        var out: [EventRecord] = []
        for bytes in [sealed?.bytes ?? [], backlog.bytes, withTurnBytes { Array($0) }] {
            for case .event(let e) in try JournaledChange.readAll(bytes) where bytes[e.member].elementsEqual(member.utf8) {
                out.append(try e.record(in: bytes))
            }
        }
        return out
    }

    static func insertBatch(_ db: SQLiteDatabase, member: String, _ events: ArraySlice<EventRecord>) throws {
        guard let first = events.first, let last = events.last else { return }
        try insertBatchRow(
            db, member: member, seqs: first.seq...last.seq, firstAt: first.at.milliseconds,
            lastAt: events.map(\.at.milliseconds).max() ?? 0, count: events.count, events: .blob(EventBatch.encode(events)))
    }

    /// One row of a member's consecutive events, `events` in EventBatch's form.
    static func insertBatchRow(
        _ db: SQLiteDatabase, member: String, seqs: ClosedRange<Int64>, firstAt: Int64, lastAt: Int64, count: Int, events: SQLValue
    ) throws {
        try db.run(
            "INSERT INTO eventBatches(member, firstSeq, lastSeq, firstAt, lastAt, count, events) VALUES(?,?,?,?,?,?,?)",
            [
                .text(member), .int(seqs.lowerBound), .int(seqs.upperBound), .int(firstAt), .int(lastAt), .int(Int64(count)),
                events,
            ])
    }

    public func pruneEvents(olderThan cutoff: Timestamp, acknowledged upTo: [String: Int64]) throws -> Int {
        try checkpoint()  // the backlog's events are pruned like the others
        return try writer.exclusive { try $0.prune(olderThan: cutoff, acknowledged: upTo) }
    }
}
