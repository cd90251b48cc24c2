// Backup, restore and check of a store on disk, for `permission-relay backup`, `restore`
// and `check`. Each opens the database on a connection of its own, so it works beside a
// running relay (WAL lets readers and the writer go on together), and changes nothing
// but its destination.

import CSQLite
import Foundation
import Glibc
import RelayModel
import RelayProtocol

extension SQLiteStore {
    /// Writes a consistent copy of the database at `source` to `destination`, a new file,
    /// with SQLite's online backup API; the copy is one self-contained file (no WAL).
    public static func backup(databaseAt source: String, to destination: String) throws {
        if let loss = lossBeforeOpening(source) { throw StoreError(loss) }
        if let why = unreadableStore(source) { throw StoreError(why) }
        guard access(destination, F_OK) != 0 else {
            throw StoreError("\(destination) already exists; choose a new file, or remove it first")
        }
        let folder = destination.lastIndex(of: "/").map { String(destination[..<$0]) } ?? "."
        var st = stat()
        guard stat(folder.isEmpty ? "/" : folder, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
            throw StoreError("there is no directory \(folder) to write \(destination) in: make it first")
        }
        let partial = destination + ".partial"
        guard access(partial, F_OK) != 0 else {
            throw StoreError("\(partial) already exists (a backup under way, or one that was stopped): remove it first")
        }
        do {
            let from = try SQLiteDatabase(path: source, readOnly: true)
            try from.exec("PRAGMA busy_timeout = 5000")
            let to = try SQLiteDatabase(path: partial)
            try from.backup(to: to)
            _ = try to.text("PRAGMA journal_mode = DELETE")
            let check = try to.text("PRAGMA quick_check")
            guard check == "ok" else {
                throw StoreError(
                    "the copy does not check out (\(check ?? "no answer")); the store may be damaged: run permission-relay check")
            }
        } catch {
            // The copy's own journal files too (it takes the store's WAL mode as it copies).
            for suffix in ["", "-wal", "-shm", "-journal"] { unlink(partial + suffix) }
            throw error
        }
        try syncFile(partial)
        guard rename(partial, destination) == 0 else {
            let why = String(cString: strerror(errno))
            unlink(partial)
            throw StoreError("cannot move the backup into place at \(destination): \(why)")
        }
        try syncDirectory(of: destination)
    }

    /// Puts the backup at `backup` in place as the store at `path`, whose relay must be
    /// stopped. The files of the store it replaces (its database, WAL and any older relay's
    /// journals) are kept beside it under `path.replaced`, or, when an earlier restore kept
    /// some there, `path.replaced.2` and so on: a restore never writes over a store.
    /// Returns the files kept (none: there was no store).
    @discardableResult
    public static func restore(backup: String, to path: String) throws -> [String] {
        var st = stat()
        guard stat(backup, &st) == 0, access(backup, R_OK) == 0 else {
            throw StoreError("cannot read \(backup): \(String(cString: strerror(errno)))")
        }
        guard st.st_mode & S_IFMT == S_IFREG else { throw StoreError("\(backup) is not a file: give the backup file itself") }
        let copy: SQLiteDatabase
        let version: Int64
        do {
            copy = try SQLiteDatabase(path: backup, readOnly: true)
            guard try copy.text("PRAGMA quick_check") == "ok", let v = try copy.scalar("SELECT max(version) FROM migrations") else {
                throw StoreError("it does not check out")
            }
            version = v
        } catch {
            throw StoreError("\(backup) is not a backup of a relay's store, or a damaged one (\(error))")
        }
        // Put in place, it would only be refused at the next start.
        guard version <= migrations.count else {
            throw StoreError(
                "\(backup) has schema version \(version), newer than this relay knows (\(migrations.count)): restore it with"
                    + " the newer relay's programs")
        }
        let staging = path + ".restoring"
        unlink(staging)
        do {
            let to = try SQLiteDatabase(path: staging)
            try copy.backup(to: to)
            _ = try to.text("PRAGMA journal_mode = WAL")
            try migrate(to)
            try startStreamsAfterEverySeqGiven(to)
            try to.checkpoint(mode: SQLITE_CHECKPOINT_TRUNCATE)
        } catch {
            unlink(staging)
            throw error
        }
        try syncFile(staging)
        // Every file a start reads goes aside, also without its database (relay.db deleted,
        // as a damaged store's advice leads to): left, a WAL would be replayed onto the
        // backup, and a journal folded into it.
        let suffixes = ["", "-wal", "-changes.0", "-changes.1"]
        let present = suffixes.filter { access(path + $0, F_OK) == 0 }
        var kept: [String] = []
        if !present.isEmpty {
            let aside =
                (1...).lazy.map { $0 == 1 ? path + ".replaced" : path + ".replaced.\($0)" }
                .first { name in suffixes.allSatisfy { access(name + $0, F_OK) != 0 } }!
            for suffix in present {
                guard rename(path + suffix, aside + suffix) == 0 else {
                    throw StoreError("cannot move \(path + suffix) aside: \(String(cString: strerror(errno)))")
                }
                kept.append(aside + suffix)
            }
        }
        unlink(path + "-shm")
        guard rename(staging, path) == 0 else { throw StoreError("cannot put the backup in place: \(String(cString: strerror(errno)))") }
        try syncDirectory(of: path)
        return kept
    }

    /// Seqs a restored store's streams skip: more than any stream is given between a backup
    /// and its restore.
    static let seqsSkippedAtRestore: Int64 = 1 << 32

    /// The relay gave seqs after the backup was made that the backup knows nothing of: each
    /// stream goes on above any it may have given, so that none is given again (a client
    /// that processed one would take the new event for it, and skip it): above its head by
    /// `seqsSkippedAtRestore`, and above the time of the restore in microseconds, which no
    /// stream reaches between two restores (a second restore of the same backup, say). The
    /// backup's events stay, for the sessions that had not had them; the jump is a restore
    /// point, so that a session resuming past them is told `gap` (Core+Session.swift).
    static func startStreamsAfterEverySeqGiven(_ db: SQLiteDatabase) throws {
        let nowMicros = Int64(Date().timeIntervalSince1970 * 1_000_000)
        try db.transaction {
            try db.exec(
                """
                INSERT INTO heads(member, head) SELECT id, 0 FROM members WHERE true ON CONFLICT(member) DO NOTHING;
                INSERT INTO heads(member, head) SELECT member, max(lastSeq) FROM events WHERE true GROUP BY member
                    ON CONFLICT(member) DO UPDATE SET head = max(head, excluded.head);
                INSERT OR REPLACE INTO restorePoints(member, through, head)
                    SELECT member, head, max(head + \(seqsSkippedAtRestore), \(nowMicros)) FROM heads;
                UPDATE heads SET head = max(head + \(seqsSkippedAtRestore), \(nowMicros));
                """)
        }
    }

    /// Why the store at `path` cannot be read, as `serve` would say (nil: it can be): there
    /// is none, it is not this user's to read, or a link is in its place (never followed).
    static func unreadableStore(_ path: String) -> String? {
        let denied = "cannot read \(path): permission denied; run this as the relay's user, or as root"
        var st = stat()
        guard lstat(path, &st) == 0 else {
            switch errno {
            case ENOENT: return "there is no store at \(path)"
            case EACCES: return denied
            default: return "cannot read \(path): \(String(cString: strerror(errno)))"
            }
        }
        guard st.st_mode & S_IFMT == S_IFREG else {
            return "\(path) is not a regular file (a link is never followed); remove it, or restore the store from a backup"
        }
        return access(path, R_OK) == 0 ? nil : denied
    }

    /// What `check` throws for a store an older relay wrote, once SQLite's integrity check
    /// found it whole: the relay's own rules are its own schema's (a start, or a restore,
    /// upgrades it).
    public struct OlderSchema: Error, CustomStringConvertible {
        public let version: Int
        public var description: String {
            "its schema version \(version) is an older relay's: check it with that relay, or upgrade a copy (restore a backup"
                + " of it elsewhere, start this relay on it once) and check that"
        }
    }

    /// What is wrong with the store at `path`: SQLite's integrity check, then the relay's
    /// own invariants. Empty when all is well; throws for a store of another relay version
    /// (`OlderSchema` for an older one).
    public static func check(databaseAt path: String) throws -> [String] {
        if let loss = lossBeforeOpening(path) { return [loss] }
        if let why = unreadableStore(path) { throw StoreError(why) }
        let db = try SQLiteDatabase(path: path, readOnly: true)
        try db.exec("PRAGMA busy_timeout = 5000")
        var findings: [String] = []
        do {
            try db.run(dynamic: "PRAGMA integrity_check") { r in
                if r.text(0) != "ok" { findings.append("SQLite: \(r.text(0))") }
            }
        } catch let e as SQLiteError where e.isDamaged {
            return ["SQLite: \(e.message)"]
        }
        guard findings.isEmpty else { return findings }
        let version = Int(try db.scalar("SELECT max(version) FROM migrations") ?? 0)
        // Another version's store is not damaged: this relay's rules are not its rules.
        guard version <= migrations.count else {
            throw StoreError(
                "its schema version \(version) is newer than this relay knows (\(migrations.count)); check it with a newer relay")
        }
        guard version == migrations.count else { throw OlderSchema(version: version) }
        for n in 0..<2 where access("\(path)-changes.\(n)", F_OK) == 0 {
            findings.append("\(path)-changes.\(n) is a journal of an older relay: the next start folds it into the database")
        }
        try db.run("BEGIN")  // one snapshot for all that follows
        defer { try? db.run("COMMIT") }
        // What a start would refuse, refused here too.
        do {
            _ = try readRecords(from: db, allQuestions: false)
            _ = try questionTail(from: db)
        } catch let e as SQLiteError where e.code == 11 {
            findings.append(e.message + " (a start refuses the store)")
        }
        var heads: [String: Int64] = [:]
        try db.run("SELECT member, head FROM heads") { r in heads[r.text(0)] = r.int(1) }
        try db.run("SELECT member, firstSeq, lastSeq, at, topics, frames FROM events") { r in
            do {
                _ = try events(of: r.text(0), first: r.int(1), last: r.int(2), at: r.int(3), topics: r.text(4), frames: r.blob(5))
            } catch {
                findings.append("\(error)".replacingOccurrences(of: "SQLite error 11: ", with: ""))
            }
        }
        var jumps: [String: [RestorePoint]] = [:]
        try db.run("SELECT member, through, head FROM restorePoints") { r in
            jumps[r.text(0), default: []].append(RestorePoint(through: r.int(1), head: r.int(2)))
        }
        try db.run("SELECT member, min(firstSeq), max(lastSeq), sum(lastSeq - firstSeq + 1) FROM events GROUP BY member") { r in
            let (member, first, last, count) = (r.text(0), r.int(1), r.int(2), r.int(3))
            // The seqs a restore jumped over, between the first and last events, were never stored here.
            let jumped = (jumps[member] ?? []).filter { $0.through >= first && $0.head < last }.reduce(0) { $0 + $1.head - $1.through }
            let span = last - first + 1 - jumped
            if span > count {
                findings.append("\(member)'s events \(first)…\(last) have \(span - count) missing in between")
            } else if span < count {
                findings.append("\(member)'s events \(first)…\(last) are stored more than once (\(count - span) too many)")
            }
            heads[member] = max(heads[member] ?? 0, last)
        }
        let indexedThrough = try db.scalar("SELECT value FROM settings WHERE key = 'indexedThroughRow'") ?? 0
        if let unindexed = try db.scalar(
            "SELECT count(*) FROM events e WHERE e.id <= ? AND NOT EXISTS (SELECT 1 FROM eventIndex i WHERE i.member = e.member AND i.lastSeq = e.lastSeq AND i.id = e.id)",
            [.int(indexedThrough)]),
            unindexed > 0
        {
            findings.append("\(unindexed) stored event rows are missing from the events index (rows up to \(indexedThrough) must be in it)")
        }
        if let stray = try db.scalar(
            "SELECT count(*) FROM eventIndex i WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.id = i.id AND e.member = i.member AND e.lastSeq = i.lastSeq)"
        ),
            stray > 0
        {
            findings.append("\(stray) entries of the events index lead to no stored event row")
        }
        var members: [String: (role: String, removed: Bool)] = [:]
        try db.run("SELECT id, role, removed FROM members") { r in members[r.text(0)] = (r.text(1), r.int(2) != 0) }
        try db.run("SELECT member, name, cursor, acknowledged FROM sessions") { r in
            let (member, name, cursor) = (r.text(0), r.text(1), r.int(2))
            if members[member] == nil { findings.append("session \(name) belongs to \(member), who is not a member") }
            if cursor > heads[member] ?? 0 {
                findings.append("session \(name) of \(member) has cursor \(cursor), beyond the stream's head \(heads[member] ?? 0)")
            }
            if !r.isNull(3) && r.int(3) > cursor {
                findings.append("session \(name) of \(member) has acknowledged \(r.int(3)), beyond its cursor \(cursor)")
            }
        }
        // Read as a request reads it (content, state and outcome), and its id beside.
        try db.run(dynamic: "SELECT \(questionColumns), q.id FROM questions q \(withState) ORDER BY q.key") { r in
            let (id, child, status) = (r.text(8), r.text(0), r.text(2))
            if (try? Self.question(from: r)) == nil { findings.append("question \(id) (row \(r.int(7))) cannot be read") }
            guard let m = members[child], m.role == Role.child.rawValue else {
                return findings.append("question \(id) was asked by \(child), who is not a child of this relay")
            }
            if status == QuestionStatus.pending.rawValue && m.removed {
                findings.append("question \(id) is pending, but its child \(child) was removed")
            }
        }
        // The lookup tables hold every question up to their mark, and nothing else (but entries
        // of the lookup by id whose question was forgotten, until a sweep drops them).
        let mark = try db.scalar("SELECT value FROM settings WHERE key = 'questionsIndexedThrough'") ?? 0
        var ids: [Int64: (high: Int64, low: Int64)] = [:]
        try db.run("SELECT high, low, key FROM questionIDs") { r in ids[r.int(2)] = (r.int(0), r.int(1)) }
        var (unlisted, stray) = (Int64(0), Int64(0))
        try db.run("SELECT id, key FROM questions") { r in
            let listed = ids.removeValue(forKey: r.int(1))
            guard let id = QuestionID(r.text(0)).map(idColumns), let listed else {
                if r.int(1) <= mark { unlisted += 1 }
                return
            }
            if listed != id { stray += 1 }
        }
        for (count, what) in [
            (unlisted, "stored questions are missing from the lookup by id"),
            (stray, "entries of the lookup by id lead to another question"),
            (
                try db.scalar(
                    "SELECT count(*) FROM questions q WHERE q.key <= ? AND NOT EXISTS (SELECT 1 FROM questionPlaces p WHERE p.child = q.child AND p.createdAt = q.createdAt AND p.key = q.key)",
                    [.int(mark)]) ?? 0, "stored questions are missing from the lookup by child"
            ),
            (
                try db.scalar(
                    "SELECT count(*) FROM questionPlaces p WHERE NOT EXISTS (SELECT 1 FROM questions q WHERE q.key = p.key AND q.child = p.child AND q.createdAt = p.createdAt)"
                ) ?? 0, "entries of the lookup by child lead to no question"
            ),
            (
                // A start reads the pending questions up to the mark from this list alone.
                try db.scalar(
                    dynamic:
                        "SELECT count(*) FROM questions q \(withState) WHERE q.key <= ? AND \(status) = 'pending' AND NOT EXISTS (SELECT 1 FROM pendingQuestions p WHERE p.key = q.key)",
                    [.int(mark)]) ?? 0, "pending questions are missing from the list of pending questions"
            ),
        ] where count > 0 {
            findings.append("\(count) \(what) (questions up to row \(mark) must be in it)")
        }
        if let stray = try db.scalar(
            "SELECT count(*) FROM questionStates s WHERE NOT EXISTS (SELECT 1 FROM questions q WHERE q.key = s.key)"),
            stray > 0
        {
            findings.append("\(stray) states of questions belong to no stored question")
        }
        // The tally the forgetting of old questions goes by (the schema's triggers keep it).
        var tally: [String: (count: Int64, bytes: Int64)] = [:]
        try db.run("SELECT child, count, bytes FROM questionTally WHERE count != 0 OR bytes != 0") { r in
            tally[r.text(0)] = (r.int(1), r.int(2))
        }
        try db.run("SELECT child, count(*), sum(length(CAST(content AS BLOB))) FROM questions GROUP BY child") { r in
            let (child, count, bytes) = (r.text(0), r.int(1), r.int(2))
            let held = tally.removeValue(forKey: child) ?? (0, 0)
            if held != (count, bytes) {
                findings.append(
                    "the question tally of \(child) says \(held.count) questions of \(held.bytes) bytes; it has \(count) of \(bytes)")
            }
        }
        for (child, held) in tally {
            findings.append("the question tally of \(child) says \(held.count) questions of \(held.bytes) bytes; it has none")
        }
        // Rows the core does not know of would come back as the handle's state at a restart.
        try db.run("SELECT child, kind, value, count(*) FROM knownHandles GROUP BY child, kind, value HAVING count(*) > 1") { r in
            findings.append("the known handle \(r.text(1)):\(r.text(2)) of \(r.text(0)) is stored \(r.int(3)) times")
        }
        return findings
    }

    static func syncFile(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0, fsync(fd) == 0 else {
            let why = String(cString: strerror(errno))
            if fd >= 0 { close(fd) }
            throw StoreError("cannot sync \(path): \(why)")
        }
        close(fd)
    }
}
