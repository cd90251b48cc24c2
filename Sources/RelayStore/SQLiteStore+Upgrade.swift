// The first start over a data directory of a relay that kept journals beside its
// database (`relay.db-changes.0` and `.1`, see Legacy/): the changes the tables do not
// hold yet are folded into the database in one transaction, and only then are the
// journals removed. A journal that cannot be read stops the start with what to do;
// nothing is dropped without a word.

import CSQLite
import Glibc
import RelayModel
import RelayProtocol

extension SQLiteStore {
    /// Returns whether there were journals (and the tables were written anew).
    func foldLegacyJournals(sync: SyncMode) throws -> Bool {
        let journals: [String] = (0..<2).map { "\(self.path)-changes.\($0)" }
        let paths = journals.filter { access($0, F_OK) == 0 }
        guard !paths.isEmpty else { return false }
        let applied = try db.scalar("SELECT value FROM settings WHERE key = 'journalGeneration'") ?? 0
        var unapplied: [LegacyJournal] = []
        for p in paths {
            let bytes = try Self.readFile(p)
            if bytes.isEmpty { continue }  // made, never written
            guard let journal = LegacyJournal(bytes: bytes) else {
                throw StoreError(
                    "\(p) is damaged (its header is not a journal's), and the changes it held may not be in the database:"
                        + " restore the data directory from a backup, or move \(p) aside to start without them")
            }
            if journal.generation > applied { unapplied.append(journal) }
        }
        unapplied.sort { $0.generation < $1.generation }
        for (i, journal) in unapplied.enumerated() where journal.generation != applied + 1 + Int64(i) {
            throw StoreError(
                "the journals beside \(path) hold generation \(journal.generation) but not \(applied + 1 + Int64(i)),"
                    + " which the database does not hold either: restore the data directory from a backup")
        }
        var changes: [LegacyChange] = []
        for journal in unapplied {
            for record in journal.records {
                do {
                    changes += try LegacyChange.decode(record)
                } catch {
                    throw StoreError(
                        "a record of \(path)-changes.\(journal.generation % 2) cannot be read (\(error)): restore the data directory from a backup"
                    )
                }
            }
        }
        let before = try load(allQuestions: true)
        var after = before
        after.apply(legacy: changes)
        try db.transaction {
            try db.exec("DELETE FROM families; DELETE FROM members; DELETE FROM questions; DELETE FROM knownHandles; DELETE FROM sessions")
            var rewritten: [Change] = after.families.map { .family($0) } + after.members.map { .member($0) }
            rewritten += after.questions.map { .question($0) }
            // A journal's handles had no rows: all are numbered again.
            for (i, var k) in after.knownHandles.enumerated() {
                k.row = Int64(i + 1)
                rewritten.append(.knownHandle(k))
            }
            rewritten += after.sessions.map { .session($0) }
            // Events as appended; never stamped before the newest the tables hold.
            var latest = before.lastEventAt
            for case .event(var e) in changes {
                e.at = max(e.at, latest ?? e.at)
                latest = e.at
                rewritten.append(.event(e))
            }
            try commitInTransaction(rewritten)
            for (member, head) in after.heads {
                try db.run(
                    "INSERT INTO heads(member, head) VALUES(?, ?) ON CONFLICT(member) DO UPDATE SET head = max(head, excluded.head)",
                    [.text(member), .int(head)])
            }
            try noteQuestionRow(after.lastQuestionRow)
            // The questions were written again, outside the lookup tables: a pass adds them all.
            try db.exec("DELETE FROM questionIDs; INSERT OR REPLACE INTO settings(key, value) VALUES('questionsIndexedThrough', 0)")
            try db.run(
                "INSERT OR REPLACE INTO settings(key, value) VALUES('journalGeneration', ?)",
                [.int(unapplied.last?.generation ?? applied)])
        }
        // The fold is in the database (and on disk, when syncing fully) before the journals go.
        if sync == .full { try db.checkpoint(mode: SQLITE_CHECKPOINT_FULL) }  // (the checkpointer starts after)
        for p in paths { unlink(p) }
        try Self.syncDirectory(of: path)
        return true
    }

    static func readFile(_ path: String) throws -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { throw StoreError("cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw StoreError("cannot read \(path): \(String(cString: strerror(errno)))") }
            if n == 0 { return out }
            out += chunk[0..<n]
        }
    }

    /// Makes the directory entries of the directory holding `path` durable (files made or removed).
    static func syncDirectory(of path: String) throws {
        let dir = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        let fd = open(dir.isEmpty ? "/" : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError("cannot open \(dir): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw StoreError("cannot sync \(dir): \(String(cString: strerror(errno)))") }
    }
}
