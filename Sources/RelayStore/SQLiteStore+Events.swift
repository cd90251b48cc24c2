// The event streams in the SQLite store: a row per member per commit (schema step 4; more
// past `rowBytes`), holding its events' frames one after another and their topic kinds.
//
// Rows are written unindexed (schema step 6): an index entry per member per commit is a
// page of its own to write, yet most rows are acknowledged, and dropped, within seconds.
// The unindexed rows are the newest (those above `indexedThroughRow`) and are listed in
// memory instead (`EventTail`, rebuilt at start from those rows alone). Their ids are
// given here, in order, never at or below the mark (SQLite would give a dropped top id
// again). Pruning steps look at them in order of appending once they are settled: each
// row that every durable session has acknowledged (or that is past retention) goes; one
// that must stay waits, listed, for a round that adds the rows waiting to the
// (member, lastSeq) index, the table `eventIndex` (schema step 10), a member at a time:
// its entries then share their pages, where a step's rows spread over every member's.
// The mark moves up to the first row still waiting.

import RelayModel
import RelayProtocol

/// The store's rows that are not in the (member, lastSeq) index, and what is known of
/// each stream without reading it. Changed by the writer after each commit and pruning
/// step, read by the loop for replays.
struct EventTail: Sendable {
    struct Row: Sendable {
        let first: Int64
        let last: Int64
        let id: Int64
        /// When its last event was appended (milliseconds), for the retention window.
        let at: Int64
    }
    /// Every row up to it is indexed (or gone); every row above it is listed in `rows`.
    var indexedThrough: Int64 = 0
    /// The id the next row gets: above every row there is or was, and above the mark.
    var nextRow: Int64 = 1
    /// Per member, its unindexed rows in order: a slice, so that trimming its front is a
    /// step of its start, not a copy (appending reallocates past the trimmed rows).
    var rows: [String: ArraySlice<Row>] = [:]
    /// The unindexed rows' members in order of their ids, for the mark to trim `rows` by.
    var order: [(id: Int64, member: String)] = []
    var orderStart = 0
    /// The newest seq stored per member, also once its events are gone (`heads`).
    var stored: [String: Int64] = [:]
    /// Per member with indexed rows: the oldest of them (its last seq and when it was appended).
    var pinned: [String: (last: Int64, at: Int64)] = [:]

    mutating func append(_ member: String, _ row: Row) {
        rows[member, default: []].append(row)
        order.append((row.id, member))
        stored[member] = row.last
        nextRow = row.id + 1
    }

    /// Forgets `member`'s oldest listed rows, through `seq`: dropped.
    mutating func dropFront(_ member: String, through seq: Int64) {
        while let first = rows[member]?.first, first.last <= seq { rows[member]!.removeFirst() }
        if rows[member]?.isEmpty == true { rows[member] = nil }
    }

    /// Forgets the listed rows up to `mark`: indexed or dropped.
    mutating func trim(through mark: Int64) {
        indexedThrough = max(indexedThrough, mark)
        while orderStart < order.count, order[orderStart].id <= mark {
            let member = order[orderStart].member
            if let first = rows[member]?.first, first.id <= mark {
                rows[member]!.removeFirst()  // in place
                if rows[member]!.isEmpty { rows[member] = nil }
            }
            orderStart += 1
        }
        if orderStart > 4096 && orderStart * 2 > order.count {
            order.removeFirst(orderStart)
            orderStart = 0
        }
    }
}

extension SQLiteStore {
    /// Reads the unindexed rows and each stream's newest seq: what `EventTail` holds.
    func loadTail() throws {
        var t = EventTail()
        t.indexedThrough = try db.scalar("SELECT value FROM settings WHERE key = 'indexedThroughRow'") ?? 0
        t.nextRow = max(t.indexedThrough, try db.scalar("SELECT max(id) FROM events") ?? 0) + 1
        try db.run("SELECT member, head FROM heads") { r in t.stored[r.text(0)] = r.int(1) }
        var pinned: [String: Int64] = [:]
        try db.run("SELECT member, max(lastSeq) FROM eventIndex GROUP BY member") { r in pinned[r.text(0)] = r.int(1) }
        for (member, last) in pinned {
            t.stored[member] = max(t.stored[member] ?? 0, last)
            try db.run(
                "SELECT e.lastSeq, e.at FROM eventIndex i JOIN events e ON e.id = i.id AND e.member = i.member WHERE i.member = ? ORDER BY i.lastSeq LIMIT 1",
                [.text(member)]
            ) { r in
                t.pinned[member] = (r.int(0), r.int(1))
            }
        }
        let next = t.nextRow
        try db.run("SELECT id, member, firstSeq, lastSeq, at FROM events WHERE id > ? ORDER BY id", [.int(t.indexedThrough)]) {
            r in
            let member = r.text(1), last = r.int(3)
            t.append(member, EventTail.Row(first: r.int(2), last: last, id: r.int(0), at: r.int(4)))
            t.stored[member] = max(t.stored[member] ?? 0, last)
        }
        t.nextRow = max(t.nextRow, next)
        // A round cut short goes on: every row up to its end was looked at, and those left
        // stay (some may be in the index already).
        var s = EventScan(examinedThrough: t.indexedThrough)
        if let through: Int64 = try db.scalar("SELECT value FROM settings WHERE key = 'indexRoundThrough'"), through > t.indexedThrough {
            for (member, rows) in t.rows {
                let waiting = rows.prefix { $0.id <= through }.count
                guard waiting > 0 else { continue }
                s.staying.insert(member)
                s.stayingRows += waiting
            }
            s.examinedThrough = through
            s.round = IndexRound(through: through, members: s.staying.sorted())
            // Rows up to its end were looked at, some dropped: an id there given again would
            // be taken for one looked at, and end below the mark outside the index.
            t.nextRow = max(t.nextRow, through + 1)
        }
        eventScan = s
        tail.withLock { $0 = t }
    }

    public var eventPosition: Int64 { tail.withLock { $0.nextRow - 1 } }

    /// A row of a member's events takes no more once its frames come to this many bytes
    /// (the rest of the commit's go in rows after it). A replay step reads whole rows and
    /// checks every frame in them: a row of one commit's many large events (questions that
    /// expire together with large choices, say) would otherwise be read and checked again
    /// at every step of its replay, which takes about a step's budget (256 KiB) at a time.
    static let rowBytes = 256 << 10

    /// Appends `events` (in order of appending) as a row per member (or more, past
    /// `rowBytes`), after checking that each member's first one follows `stored(member)`: a
    /// seq is never stored twice.
    /// Rows given `firstID` (and on, in order) stay out of the (member, lastSeq) index
    /// (schema step 6 on); without it, SQLite gives the ids and the rows are indexed.
    @discardableResult
    static func insert(
        _ events: [EventRecord], into db: SQLiteDatabase, firstID: Int64?, after stored: (String) throws -> Int64
    ) throws -> [(member: String, row: EventTail.Row)] {
        guard !events.isEmpty else { return [] }
        // A member's events of the commit, gathered as the row that will hold them.
        struct Gathered {
            let member: String
            let first: Int64
            var last: Int64
            var at: Int64
            var frames: [UInt8]
            var topics: [UInt8]  // a JSON array of the topic kinds, null for none
        }
        var gathered: [Gathered] = []
        var place: [String: Int] = [:]
        place.reserveCapacity(events.count)
        for e in events {
            func appendTopic(to topics: inout [UInt8]) {
                if let topic = e.topic {
                    topics.append(UInt8(ascii: "\""))
                    topics.append(contentsOf: topic.rawValue.utf8)  // kinds are plain words: nothing to escape
                    topics.append(UInt8(ascii: "\""))
                } else {
                    topics.append(contentsOf: "null".utf8)
                }
            }
            func startRow() {
                place[e.member] = gathered.count
                var topics: [UInt8] = [UInt8(ascii: "[")]
                appendTopic(to: &topics)
                gathered.append(
                    Gathered(member: e.member, first: e.seq, last: e.seq, at: e.at.milliseconds, frames: e.frame, topics: topics))
            }
            // The first above what is stored (it may follow a head whose events are gone),
            // the others one by one.
            guard let i = place[e.member] else {
                let previous = try stored(e.member)
                guard e.seq > previous else {
                    throw SQLiteError(
                        code: 19, message: "event \(e.seq) of \(e.member) does not follow \(previous): a seq is never stored twice")
                }
                startRow()
                continue
            }
            guard e.seq == gathered[i].last + 1 else {
                throw SQLiteError(
                    code: 19, message: "event \(e.seq) of \(e.member) does not follow \(gathered[i].last): a seq is never stored twice")
            }
            if gathered[i].frames.count >= rowBytes {
                startRow()
                continue
            }
            gathered[i].last = e.seq
            gathered[i].at = e.at.milliseconds
            gathered[i].frames.append(contentsOf: e.frame)
            gathered[i].topics.append(UInt8(ascii: ","))
            appendTopic(to: &gathered[i].topics)
        }
        var rows: [(member: String, row: EventTail.Row)] = []
        rows.reserveCapacity(gathered.count)
        for var g in gathered {
            g.topics.append(UInt8(ascii: "]"))
            if let firstID {
                try db.run(
                    "INSERT INTO events(id, member, firstSeq, lastSeq, at, topics, frames) VALUES(?,?,?,?,?,?,?)",
                    [
                        .int(firstID + Int64(rows.count)), .text(g.member), .int(g.first), .int(g.last), .int(g.at), .utf8(g.topics),
                        .blob(g.frames),
                    ])
            } else {
                try db.run(
                    "INSERT INTO events(member, firstSeq, lastSeq, at, topics, frames) VALUES(?,?,?,?,?,?)",
                    [.text(g.member), .int(g.first), .int(g.last), .int(g.at), .utf8(g.topics), .blob(g.frames)])
            }
            rows.append((g.member, EventTail.Row(first: g.first, last: g.last, id: db.lastInsertedRow, at: g.at)))
        }
        return rows
    }

    /// The newest seq stored for `member` as the tables say, with every row in the index
    /// (schema steps 4 and 5).
    static func storedHead(of member: String, in db: SQLiteDatabase) throws -> Int64 {
        try db.scalar(
            """
            SELECT max(coalesce((SELECT max(lastSeq) FROM events WHERE member = ?1), 0),
                coalesce((SELECT head FROM heads WHERE member = ?1), 0))
            """, [.text(member)]) ?? 0
    }

    public func events(member: String, after seq: Int64, limit: Int, maxBytes: Int) throws -> [EventRecord] {
        // The unindexed rows are listed before the read begins: one the writer indexes
        // meanwhile is then read through the index as well (and taken once), never missed.
        let listed = tail.withLock { t -> ArraySlice<EventTail.Row> in
            guard let rows = t.rows[member] else { return [] }
            var low = rows.startIndex, high = rows.endIndex  // the first row with events after `seq`
            while low < high {
                let mid = (low + high) / 2
                if rows[mid].last <= seq { low = mid + 1 } else { high = mid }
            }
            return rows[low...]
        }
        try reader.exec("BEGIN")
        defer { try? reader.exec("COMMIT") }
        var out: [EventRecord] = []
        var bytes = 0
        var full: Bool { out.count >= limit || bytes >= maxBytes }
        func take(_ r: Row) throws {
            for e in try Self.events(of: member, first: r.int(0), last: r.int(1), at: r.int(2), topics: r.text(3), frames: r.blob(4))
            where e.seq > (out.last?.seq ?? seq) && !full {
                out.append(e)
                bytes += e.frame.count
            }
            if full { throw SQLiteDatabase.stop }  // the rows after it are not read
        }
        // Every row holds at least one event, so `limit` rows are enough.
        try reader.run(
            """
            SELECT e.firstSeq, e.lastSeq, e.at, e.topics, e.frames FROM eventIndex i JOIN events e ON e.id = i.id AND e.member = i.member
                WHERE i.member = ? AND i.lastSeq > ? ORDER BY i.lastSeq LIMIT ?
            """,
            [.text(member), .int(seq), .int(Int64(limit))], row: take)
        for row in listed where !full && row.last > (out.last?.seq ?? seq) {
            try reader.run("SELECT firstSeq, lastSeq, at, topics, frames FROM events WHERE id = ?", [.int(row.id)], row: take)
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
            // Sent as stored: a frame damaged on disk must not reach a client (every frame
            // is a JSON object, §1), nor one of another seq.
            guard (try? JSON.parse(frames[(offset + 4)..<(offset + 4 + length)]))?["seq"]?.int == seq else { break }
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

    public func prune(olderThan cutoff: Timestamp, acknowledged: [String: Int64], settledThrough settled: Int64, limit: Int)
        throws -> PruneStep
    {
        if eventScan.round == nil, roundDue(eventScan) {
            eventScan.round = IndexRound(through: eventScan.examinedThrough, members: eventScan.staying.sorted())
        }
        if eventScan.round != nil { return try indexStep(limit: limit) }
        return try examineStep(olderThan: cutoff, acknowledged: acknowledged, settledThrough: settled, limit: limit)
    }

    /// Drops the rows that may go: the indexed ones, the ones waiting for a round, then the
    /// settled ones not looked at yet, each of which either goes or waits.
    private func examineStep(olderThan cutoff: Timestamp, acknowledged: [String: Int64], settledThrough settled: Int64, limit: Int)
        throws -> PruneStep
    {
        var step = PruneStep()
        let (indexedThrough, pinned, stored) = tail.withLock { ($0.indexedThrough, $0.pinned, $0.stored) }
        var pinnedNow = pinned
        var scan = eventScan
        var newMark = indexedThrough
        // Acknowledged as far as the stored cursors say, too: a cursor not committed yet
        // (its commit may still fail) lets nothing go.
        var storedAck: [String: Int64] = [:]
        func mayGo(_ member: String, last: Int64, at: Int64) throws -> Bool {
            if at < cutoff.milliseconds { return true }
            guard let ack = acknowledged[member], last <= ack else { return false }
            if storedAck[member] == nil {
                storedAck[member] =
                    try db.scalar("SELECT min(coalesce(acknowledged, cursor)) FROM sessions WHERE member = ?", [.text(member)]) ?? 0
            }
            return last <= storedAck[member]!
        }
        var budget = limit
        // Listed rows that go, each member's oldest: through which seq.
        var droppedListed: [String: Int64] = [:]
        // Dropped events are copies of what the questions hold; their freed pages are not
        // written again only to be zeroed (which `secure_delete` on, as Debian builds it,
        // does: it made dropping an event cost what writing it did). Cells on pages that
        // are written anyway are still cleared (FAST).
        try db.exec("PRAGMA secure_delete = FAST")
        defer { try? db.exec("PRAGMA secure_delete = \(secureDelete)") }
        try db.transaction {
            // What stays of each stream is always its newest events, without a hole: the
            // indexed rows (the oldest) go first, then those waiting, then the new ones.
            var dropped: [String: Int64] = [:]
            for (member, oldest) in pinned where budget > 0 {
                guard try mayGo(member, last: oldest.last, at: oldest.at) else { continue }
                var remaining: (last: Int64, at: Int64)?
                var ids: [Int64] = []
                try db.run(
                    "SELECT i.id, i.lastSeq, e.at FROM eventIndex i JOIN events e ON e.id = i.id AND e.member = i.member WHERE i.member = ? ORDER BY i.lastSeq LIMIT ?",
                    [.text(member), .int(Int64(budget + 1))]
                ) { r in
                    guard remaining == nil else { return }
                    if ids.count < budget, try mayGo(member, last: r.int(1), at: r.int(2)) {
                        ids.append(r.int(0))
                        dropped[member] = r.int(1)
                    } else {
                        remaining = (r.int(1), r.int(2))
                    }
                }
                for id in ids { try db.run("DELETE FROM events WHERE id = ?", [.int(id)]) }
                if let last = dropped[member] {
                    try db.run("DELETE FROM eventIndex WHERE member = ? AND lastSeq <= ?", [.text(member), .int(last)])
                }
                budget -= ids.count
                pinnedNow[member] = remaining
            }
            for member in scan.staying where budget > 0 && pinnedNow[member] == nil {
                let rows = tail.withLock { $0.rows[member] ?? [] }
                var ids: [Int64] = []
                var waits = false
                for row in rows {
                    guard row.id <= scan.examinedThrough else { break }
                    guard ids.count < budget, try mayGo(member, last: row.last, at: row.at) else {
                        waits = true
                        break
                    }
                    ids.append(row.id)
                    dropped[member] = row.last
                    droppedListed[member] = row.last
                }
                for id in ids { try db.run("DELETE FROM events WHERE id = ?", [.int(id)]) }
                budget -= ids.count
                scan.stayingRows -= ids.count
                if !waits { scan.staying.remove(member) }
            }
            // Then the settled rows not looked at yet, every one of them in order of
            // appending (so that a run of neighbours to drop holds no row that was not looked at).
            var rows: [(id: Int64, member: String, last: Int64, at: Int64)] = []
            if budget > 0 {
                try db.run(
                    "SELECT id, member, lastSeq, at FROM events WHERE id > ? AND id <= ? ORDER BY id LIMIT ?",
                    [.int(scan.examinedThrough), .int(settled), .int(Int64(budget))]
                ) { r in rows.append((r.int(0), r.text(1), r.int(2), r.int(3))) }
            }
            // Neighbouring rows that go, go in one statement: they share their pages.
            var run: (from: Int64, to: Int64)?
            func endRun() throws {
                guard let r = run else { return }
                try db.run("DELETE FROM events WHERE id BETWEEN ? AND ?", [.int(r.from), .int(r.to)])
                run = nil
            }
            for row in rows {
                if pinnedNow[row.member] == nil, !scan.staying.contains(row.member), try mayGo(row.member, last: row.last, at: row.at) {
                    run = (run?.from ?? row.id, row.id)
                    dropped[row.member] = row.last
                    droppedListed[row.member] = row.last
                } else {
                    try endRun()
                    scan.staying.insert(row.member)
                    scan.stayingRows += 1
                }
                scan.examinedThrough = row.id
            }
            try endRun()
            budget -= rows.count
            for (member, last) in dropped where last >= stored[member] ?? 0 {
                // Every event of it is gone: its head is kept apart, so that a seq is never given again.
                try db.run(
                    "INSERT INTO heads(member, head) VALUES(?, ?) ON CONFLICT(member) DO UPDATE SET head = max(head, excluded.head)",
                    [.text(member), .int(last)])
            }
            // Up to the first row that waits: each waiting member's first listed row that stays.
            let firstWaiting = tail.withLock { t in
                scan.staying.compactMap { m in t.rows[m]?.first { $0.last > droppedListed[m] ?? 0 }?.id }.min()
            }
            newMark = max(indexedThrough, firstWaiting.map { min($0 - 1, scan.examinedThrough) } ?? scan.examinedThrough)
            if newMark != indexedThrough {
                try db.run("INSERT OR REPLACE INTO settings(key, value) VALUES('indexedThroughRow', ?)", [.int(newMark)])
            }
            step.through = dropped
        }
        eventScan = scan
        tail.withLock { t in
            t.pinned = pinnedNow
            for (member, seq) in droppedListed { t.dropFront(member, through: seq) }
            t.trim(through: newMark)
        }
        step.more = budget <= 0 || roundDue(scan)
        return step
    }

    /// Enough rows wait to share their index pages, or a few have held the mark back for
    /// long: every row above it is listed in memory, and read at start.
    private func roundDue(_ scan: EventScan) -> Bool {
        scan.stayingRows >= eventIndexRoundRows
            || (scan.stayingRows > 0 && scan.examinedThrough - tail.withLock { $0.indexedThrough } >= 4 * Int64(eventIndexRoundRows))
    }

    /// Adds the next members' waiting rows of the round to the index, in its order: each
    /// member's entries onto its pages together. The round's last step moves the mark to
    /// its end; one cut short by a crash goes on at the next start (`loadTail`), its
    /// entries added again or left as they are.
    private func indexStep(limit: Int) throws -> PruneStep {
        guard var round = eventScan.round else { return PruneStep() }
        let firstStep = round.next == 0 && round.after == 0
        var entries: [(member: String, row: EventTail.Row)] = []
        tail.withLock { t in
            while entries.count < limit, round.next < round.members.count {
                let member = round.members[round.next]
                var full = false
                for row in t.rows[member] ?? [] where row.last > round.after {
                    guard row.id <= round.through else { break }
                    guard entries.count < limit else {
                        full = true
                        break
                    }
                    entries.append((member, row))
                }
                if full {
                    round.after = entries[entries.count - 1].row.last
                } else {
                    (round.next, round.after) = (round.next + 1, 0)
                }
            }
        }
        let done = round.next >= round.members.count
        try db.transaction {
            if firstStep {
                try db.run("INSERT OR REPLACE INTO settings(key, value) VALUES('indexRoundThrough', ?)", [.int(round.through)])
            }
            for e in entries {
                try db.run(
                    "INSERT OR IGNORE INTO eventIndex(member, lastSeq, id) VALUES(?, ?, ?)",
                    [.text(e.member), .int(e.row.last), .int(e.row.id)])
            }
            if done {
                try db.run("INSERT OR REPLACE INTO settings(key, value) VALUES('indexedThroughRow', ?)", [.int(round.through)])
                try db.run("DELETE FROM settings WHERE key = 'indexRoundThrough'")
            }
        }
        tail.withLock { t in
            for e in entries where t.pinned[e.member] == nil { t.pinned[e.member] = (e.row.last, e.row.at) }
            if done { t.trim(through: round.through) }
        }
        if done {
            eventScan = EventScan(examinedThrough: round.through)
        } else {
            eventScan.round = round
        }
        return PruneStep(more: true)
    }
}

/// Where pruning stands among the unindexed rows (the writer's thread's alone).
struct EventScan {
    /// Every row up to it was looked at by a step: the ones that could go are gone, and
    /// those left (of the members in `staying`, `stayingRows` of them) wait for a round.
    var examinedThrough: Int64
    var staying: Set<String> = []
    var stayingRows = 0
    /// The round under way, if any.
    var round: IndexRound?
}

/// A round adding the rows waiting up to `through` to the index, member by member.
struct IndexRound {
    let through: Int64
    let members: [String]
    /// The member it is at, and the seq through which that member's rows are added.
    var next = 0
    var after: Int64 = 0
}
