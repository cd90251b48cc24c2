// The SQLite store's event streams: batches of a member's consecutive events, one row
// each (see EventBatch), followed by the backlog's and this turn's events in memory.

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
        for pending in [backlogEvents[member], turnEvents[member]] {
            guard out.count < limit, let pending else { continue }
            let last = out.last?.seq ?? seq
            out.append(contentsOf: pending.lazy.filter { $0.seq > last }.prefix(limit - out.count))
        }
        return out
    }

    public func oldestEventSeq(member: String) throws -> Int64? {
        let stored = try db.scalar("SELECT min(firstSeq) FROM eventBatches WHERE member = ?", [.text(member)])
        return stored ?? backlogEvents[member]?.first?.seq ?? turnEvents[member]?.first?.seq
    }

    func insertBatch(member: String, _ events: [EventRecord]) throws { try Self.insertBatch(db, member: member, events) }

    static func insertBatch(_ db: SQLiteDatabase, member: String, _ events: [EventRecord]) throws {
        guard let first = events.first, let last = events.last else { return }
        try db.run(
            "INSERT INTO eventBatches(member, firstSeq, lastSeq, firstAt, lastAt, count, events) VALUES(?,?,?,?,?,?,?)",
            [
                .text(member), .int(first.seq), .int(last.seq), .int(first.at.milliseconds),
                .int(events.map(\.at.milliseconds).max() ?? 0), .int(Int64(events.count)), .blob(EventBatch.encode(events)),
            ])
    }

    public func pruneEvents(olderThan cutoff: Timestamp, acknowledged upTo: [String: Int64]) throws -> Int {
        try checkpoint()  // the backlog's events are pruned like the others
        var dropped = 0
        try db.transaction {
            // Heads are kept apart from the events so a stream's seq never repeats once its events are gone.
            try db.run(
                """
                INSERT OR REPLACE INTO heads(member, head)
                SELECT member, max(lastSeq) FROM eventBatches
                WHERE member IN (SELECT DISTINCT member FROM eventBatches WHERE firstAt < ?) GROUP BY member
                """, [.int(cutoff.milliseconds)])
            for member in upTo.keys {
                try db.run(
                    "INSERT OR REPLACE INTO heads(member, head) SELECT member, max(lastSeq) FROM eventBatches WHERE member = ? GROUP BY member",
                    [.text(member)])
            }
            // Whole batches go at once; a batch that straddles the line keeps its newer events.
            dropped += try dropBatches(
                where: "firstAt < ?1 AND lastAt < ?1", [.int(cutoff.milliseconds)], straddling: "firstAt < ?1"
            ) { $0.at >= cutoff }
            for (member, seq) in upTo where seq > 0 {
                dropped += try dropBatches(
                    where: "member = ?1 AND lastSeq <= ?2", [.text(member), .int(seq)], straddling: "member = ?1 AND firstSeq <= ?2"
                ) { $0.seq > seq }
            }
        }
        return dropped
    }

    /// Deletes the batches matching `whole`, then rewrites those matching `straddling`
    /// with only the events `keep` allows. Returns how many events went.
    private func dropBatches(
        where whole: String, _ args: [SQLValue], straddling: String, keep: (EventRecord) -> Bool
    ) throws -> Int {
        var dropped = Int(try db.scalar("SELECT coalesce(sum(count), 0) FROM eventBatches WHERE \(whole)", args) ?? 0)
        try db.run("DELETE FROM eventBatches WHERE \(whole)", args)
        var rewrites: [(id: Int64, member: String, events: [EventRecord])] = []
        try db.run("SELECT id, member, events FROM eventBatches WHERE \(straddling)", args) { r in
            rewrites.append((r.int(0), r.text(1), try EventBatch.decode(r.blob(2), member: r.text(1))))
        }
        for batch in rewrites {
            let kept = batch.events.filter(keep)
            dropped += batch.events.count - kept.count
            try db.run("DELETE FROM eventBatches WHERE id = ?", [.int(batch.id)])
            try insertBatch(member: batch.member, kept)
        }
        return dropped
    }
}
