// The event streams in the SQLite store: a row per member per commit (schema step 5),
// holding its events' frames one after another and their topic kinds. A commit's
// events of a member then cost one row and one index entry, however many there are.

import RelayModel
import RelayProtocol

extension SQLiteStore {
    /// Appends `events` (in order of appending) as a row per member, after checking that
    /// each member's first one follows what is stored: a seq is never stored twice.
    static func insert(_ events: [EventRecord], into db: SQLiteDatabase) throws {
        guard !events.isEmpty else { return }
        var order: [String] = []
        var byMember: [String: [EventRecord]] = [:]
        for e in events {
            if byMember[e.member] == nil { order.append(e.member) }
            byMember[e.member, default: []].append(e)
        }
        for member in order {
            let list = byMember[member]!
            // What is stored, or was once every event of the member is gone (`heads`).
            let stored =
                try db.scalar(
                    """
                    SELECT max(coalesce((SELECT max(lastSeq) FROM events WHERE member = ?1), 0),
                        coalesce((SELECT head FROM heads WHERE member = ?1), 0))
                    """, [.text(member)]) ?? 0
            var previous = stored
            for (i, e) in list.enumerated() {
                // After what is stored (its first may follow a head whose events are gone), one by one.
                guard e.seq > previous, i == 0 || e.seq == previous + 1 else {
                    throw SQLiteError(
                        code: 19, message: "event \(e.seq) of \(member) does not follow \(previous): a seq is never stored twice")
                }
                previous = e.seq
            }
            var frames: [UInt8] = []
            frames.reserveCapacity(list.reduce(0) { $0 + $1.frame.count })
            for e in list { frames.append(contentsOf: e.frame) }
            let topics = JSON.array(list.map { $0.topic.map { .string($0.rawValue) } ?? .null }).text
            try db.run(
                "INSERT INTO events(member, firstSeq, lastSeq, at, topics, frames) VALUES(?,?,?,?,?,?)",
                [
                    .text(member), .int(list[0].seq), .int(list[list.count - 1].seq), .int(list[list.count - 1].at.milliseconds),
                    .text(topics), .blob(frames),
                ])
        }
    }

    public func events(member: String, after seq: Int64, limit: Int) throws -> [EventRecord] {
        var out: [EventRecord] = []
        // Every row holds at least one event, so `limit` rows are enough.
        try reader.run(
            "SELECT firstSeq, lastSeq, at, topics, frames FROM events WHERE member = ? AND lastSeq > ? ORDER BY lastSeq LIMIT ?",
            [.text(member), .int(seq), .int(Int64(limit))]
        ) { r in
            let events = try Self.events(of: member, first: r.int(0), last: r.int(1), at: r.int(2), topics: r.text(3), frames: r.blob(4))
            for e in events where e.seq > seq && out.count < limit { out.append(e) }
        }
        return out
    }

    /// The events of one row.
    static func events(of member: String, first: Int64, last: Int64, at: Int64, topics: String, frames: [UInt8]) throws
        -> [EventRecord]
    {
        let kinds = (try? JSON.parse(topics))?.array ?? []
        var out: [EventRecord] = []
        var offset = 0
        for seq in first...max(first, last) {
            guard offset + 4 <= frames.count, kinds.count == Int(last - first + 1) else { break }
            let length = frames[offset..<(offset + 4)].reduce(0) { $0 << 8 | Int($1) }
            guard length > 0, offset + 4 + length <= frames.count else { break }
            let kind = kinds[Int(seq - first)].string.flatMap(TopicKind.init(rawValue:))
            out.append(
                EventRecord(
                    member: member, seq: seq, at: Timestamp(milliseconds: at), topic: kind,
                    frame: Array(frames[offset..<(offset + 4 + length)])))
            offset += 4 + length
        }
        guard out.count == Int(last - first + 1), offset == frames.count else {
            throw SQLiteError(code: 11, message: "the stored events \(first)…\(last) of \(member) cannot be read")  // SQLITE_CORRUPT
        }
        return out
    }

    public func prune(olderThan cutoff: Timestamp, acknowledged: [String: Int64], limit: Int) throws -> [String: Int64] {
        var through: [String: Int64] = [:]
        try db.transaction {
            // The oldest rows first, in order of appending, so that what goes is a run of
            // neighbouring pages. A member's first row that must stay keeps its later ones
            // too: what stays of each stream is always its newest events, without a hole.
            // (As no event is stamped before the one before it, rows past the retention
            // window are the oldest of each stream.) Rows that stay are passed over, up to
            // a number of rows a step may read.
            var kept: Set<String> = []
            var dropped: [Int64] = []
            // Acknowledged as far as the stored cursors say, too: a cursor not committed yet
            // (its commit may still fail) lets nothing go.
            var storedAck: [String: Int64] = [:]
            func acknowledgedStored(_ member: String) throws -> Int64 {
                if let known = storedAck[member] { return known }
                let cursor = try db.scalar("SELECT min(cursor) FROM sessions WHERE member = ?", [.text(member)]) ?? 0
                storedAck[member] = min(cursor, acknowledged[member] ?? 0)
                return storedAck[member]!
            }
            // In windows from the oldest on, so that a member whose many old rows stay (a
            // session that never acknowledges) does not keep the rows of all others behind
            // them; at most `windows` of them a step, which bounds how long a step holds
            // the writer.
            let window = limit * 4, windows = 16
            var after: Int64 = 0
            scanning: for _ in 0..<windows {
                var rows: [(id: Int64, member: String, last: Int64, at: Int64)] = []
                try db.run(
                    "SELECT id, member, lastSeq, at FROM events WHERE id > ? ORDER BY id LIMIT ?", [.int(after), .int(Int64(window))]
                ) { r in
                    rows.append((r.int(0), r.text(1), r.int(2), r.int(3)))
                }
                for row in rows where !kept.contains(row.member) {
                    guard dropped.count < limit else { break scanning }
                    let old = row.at < cutoff.milliseconds
                    if try old || (acknowledged[row.member] != nil && row.last <= acknowledgedStored(row.member)) {
                        dropped.append(row.id)
                        through[row.member] = row.last
                    } else {
                        kept.insert(row.member)
                    }
                }
                guard let last = rows.last, rows.count == window else { break }
                after = last.id
            }
            for member in through.keys {
                // Its head is kept apart, so that a seq is never given again once every event is gone.
                try db.run(
                    """
                    INSERT INTO heads(member, head) SELECT member, max(lastSeq) FROM events WHERE member = ?1 GROUP BY member
                    ON CONFLICT(member) DO UPDATE SET head = max(head, excluded.head)
                    """, [.text(member)])
            }
            for id in dropped { try db.run("DELETE FROM events WHERE id = ?", [.int(id)]) }
        }
        return through
    }
}
