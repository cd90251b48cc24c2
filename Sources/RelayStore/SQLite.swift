// A thin SQLite connection: statements prepared once and cached by their SQL text,
// errors carrying SQLite's own message, and transactions that roll back on throw.

import CSQLite
import RelayModel

/// An error from SQLite, with its result code and message.
public struct SQLiteError: StoreReadError, CustomStringConvertible, Sendable {
    public let code: Int32
    public let message: String
    public var description: String { "SQLite error \(code): \(message)" }
    /// The disk or the database is full.
    public var isFull: Bool { code & 0xFF == SQLITE_FULL }
    /// The file is not a database, or a damaged one.
    public var isDamaged: Bool { code & 0xFF == SQLITE_CORRUPT || code & 0xFF == SQLITE_NOTADB }
}

let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
let sqliteStatic: sqlite3_destructor_type? = nil

final class SQLiteDatabase {
    private var db: OpaquePointer?
    private var cache: [String: OpaquePointer] = [:]
    /// The same statements, by the address of their literal SQL.
    private var literals: [(UnsafeRawPointer, OpaquePointer)] = []

    /// SQLite configured once, before its first open: its memory statistics off. (Refused
    /// only once SQLite is initialized, by another user of it in the process: that costs
    /// speed alone, so the result is not checked.)
    private static let configured: Void = { _ = permission_sqlite_memstatus_off() }()

    /// Opens the database at `path`, creating it unless `readOnly`.
    init(path: String, readOnly: Bool = false) throws {
        Self.configured
        let mode = readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
        // NOFOLLOW: a symbolic link planted in place of the database (or its journal) is
        // refused, never written through.
        let rc = sqlite3_open_v2(path, &db, mode | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, nil)
        guard rc == SQLITE_OK else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close(db)
            db = nil
            throw SQLiteError(code: rc, message: "\(message) (\(path))")
        }
        sqlite3_extended_result_codes(db, 1)
    }

    deinit {
        for stmt in cache.values { sqlite3_finalize(stmt) }
        sqlite3_close(db)
        hook?.release()
    }

    /// Called after each commit with the WAL's length in pages, in place of SQLite's own
    /// checkpoints; when it returns true a (passive) checkpoint is due, which runs at
    /// `checkpointIfDue`, or else before the next transaction: after the commit rather
    /// than in it, so that what waits for the commit need not wait for the checkpoint too.
    /// `checkpointed` hears how many of the WAL's pages are in the database then (-1: it
    /// failed, another checkpoint being under way, or an error).
    private var hook: Unmanaged<WALHook>?
    final class WALHook {
        let afterCommit: (Int32) -> Bool
        let checkpointed: (Int32) -> Void
        /// Only the thread using the connection reads and writes it.
        var due = false
        init(_ afterCommit: @escaping (Int32) -> Bool, _ checkpointed: @escaping (Int32) -> Void) {
            (self.afterCommit, self.checkpointed) = (afterCommit, checkpointed)
        }
    }

    func setWALHook(
        _ afterCommit: @escaping (_ walPages: Int32) -> Bool, checkpointed: @escaping (_ copiedPages: Int32) -> Void
    ) {
        let box = Unmanaged.passRetained(WALHook(afterCommit, checkpointed))
        hook?.release()
        hook = box
        sqlite3_wal_hook(
            db,
            { context, handle, _, pages in
                let hook = Unmanaged<WALHook>.fromOpaque(context!).takeUnretainedValue()
                if hook.afterCommit(pages) { hook.due = true }
                return SQLITE_OK
            }, box.toOpaque())
    }

    /// Runs the checkpoint a commit made due (see `setWALHook`), if there is one.
    func checkpointIfDue() {
        guard let hook = hook?.takeUnretainedValue(), hook.due else { return }
        hook.due = false
        hook.checkpointed((try? checkpoint(mode: SQLITE_CHECKPOINT_PASSIVE)) ?? -1)
    }

    /// SQLite opened the database for reading only, though asked to write: the file is
    /// read-only to this process.
    var isReadOnly: Bool { sqlite3_db_readonly(db, "main") == 1 }

    func error(_ rc: Int32) -> SQLiteError {
        SQLiteError(code: rc, message: String(cString: sqlite3_errmsg(db)))
    }

    func exec(_ sql: String) throws {
        let rc = sqlite3_exec(db, sql, nil, nil, nil)
        guard rc == SQLITE_OK else { throw error(rc) }
    }

    /// Runs `sql` with `args`, calling `row` for every result row. The statement is found
    /// by the literal's address: hashing the text of a long statement on every run cost
    /// more than binding its values.
    func run(_ sql: StaticString, _ args: [SQLValue] = [], row: ((Row) throws -> Void)? = nil) throws {
        try run(statement: try prepared(sql), args, row: row)
    }

    /// Runs SQL made at run time (its statement is cached by its text).
    func run(dynamic sql: String, _ args: [SQLValue] = [], row: ((Row) throws -> Void)? = nil) throws {
        try run(statement: try prepared(sql), args, row: row)
    }

    /// Thrown by a row's closure: the rows it wanted are read, the rest need not be.
    struct StopRows: Error {}
    static let stop = StopRows()

    private func run(statement stmt: OpaquePointer, _ args: [SQLValue], row: ((Row) throws -> Void)?) throws {
        // Every run binds all of a statement's parameters (checked), so none need clearing.
        precondition(Int(sqlite3_bind_parameter_count(stmt)) == args.count, "a statement run with the wrong number of values")
        defer { sqlite3_reset(stmt) }
        try bindThenStep(stmt, args, from: 0, row: row)
    }

    /// Binds `args[i...]`, then steps. Text and blobs are bound where they stand, without
    /// SQLite's copy (SQLITE_STATIC): each is bound inside its own access to the bytes and
    /// the steps run innermost, so the bytes outlive every read; they are unbound before
    /// the access ends.
    private func bindThenStep(_ stmt: OpaquePointer, _ args: [SQLValue], from i: Int, row: ((Row) throws -> Void)?) throws {
        guard i < args.count else {
            while true {
                let rc = sqlite3_step(stmt)
                if rc == SQLITE_DONE { return }
                guard rc == SQLITE_ROW else { throw error(rc) }
                do { try row?(Row(stmt: stmt)) } catch is StopRows { return }
            }
        }
        let idx = Int32(i + 1)
        func check(_ rc: Int32) throws { guard rc == SQLITE_OK else { throw error(rc) } }
        func bound(_ p: UnsafeRawBufferPointer, asText: Bool) throws {
            try check(
                asText
                    ? sqlite3_bind_text(stmt, idx, p.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(p.count), sqliteStatic)
                    : sqlite3_bind_blob(stmt, idx, p.baseAddress, Int32(p.count), sqliteStatic))
            defer {
                sqlite3_reset(stmt)  // a statement takes new bindings only once reset
                let rc = sqlite3_bind_null(stmt, idx)
                assert(rc == SQLITE_OK, "a parameter bound in place could not be unbound")
            }
            try bindThenStep(stmt, args, from: i + 1, row: row)
        }
        switch args[i] {
        case .null:
            try check(sqlite3_bind_null(stmt, idx))
        case .int(let v):
            try check(sqlite3_bind_int64(stmt, idx, v))
        case .text(""), .utf8([]):
            try check(sqlite3_bind_text(stmt, idx, "", 0, sqliteTransient))  // a nil address would bind NULL
        case .text(let s):
            return try s.withUTF8Bytes { try bound(UnsafeRawBufferPointer($0), asText: true) }
        case .utf8(let b):
            return try b.withUnsafeBytes { try bound($0, asText: true) }
        case .blob(let b):
            return try b.withUnsafeBytes { try bound($0, asText: false) }
        }
        try bindThenStep(stmt, args, from: i + 1, row: row)
    }

    func scalar(_ sql: StaticString, _ args: [SQLValue] = []) throws -> Int64? {
        try scalar(statement: try prepared(sql), args)
    }

    func scalar(dynamic sql: String, _ args: [SQLValue] = []) throws -> Int64? {
        try scalar(statement: try prepared(sql), args)
    }

    private func scalar(statement: OpaquePointer, _ args: [SQLValue]) throws -> Int64? {
        var result: Int64?
        try run(statement: statement, args) { r in result = r.isNull(0) ? nil : r.int(0) }
        return result
    }

    /// The rowid of the last row this connection inserted.
    var lastInsertedRow: Int64 { sqlite3_last_insert_rowid(db) }

    func text(_ sql: String) throws -> String? {
        var result: String?
        try run(dynamic: sql) { r in result = r.text(0) }
        return result
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    /// (Its statements are prepared once, as every `run`'s are, not compiled at each commit.)
    func transaction(_ body: () throws -> Void) throws {
        checkpointIfDue()
        try run("BEGIN IMMEDIATE")
        do {
            try body()
            try run("COMMIT")
        } catch {
            try? run("ROLLBACK")
            throw error
        }
    }

    /// Runs a checkpoint of `mode` (`SQLITE_CHECKPOINT_…`); returns how many of the WAL's
    /// pages are in the database now.
    @discardableResult
    func checkpoint(mode: Int32) throws -> Int32 {
        var done: Int32 = 0
        let rc = sqlite3_wal_checkpoint_v2(db, nil, mode, nil, &done)
        guard rc == SQLITE_OK else { throw error(rc) }
        return done
    }

    /// Copies the whole database, as of one moment, into the one `to` is connected to
    /// (SQLite's online backup API: consistent while others write).
    func backup(to destination: SQLiteDatabase) throws {
        guard let b = sqlite3_backup_init(destination.db, "main", db, "main") else {
            throw destination.error(sqlite3_errcode(destination.db))
        }
        let rc = sqlite3_backup_step(b, -1)
        let finished = sqlite3_backup_finish(b)
        guard rc == SQLITE_DONE else { throw destination.error(rc) }
        guard finished == SQLITE_OK else { throw destination.error(finished) }
    }

    private func prepared(_ sql: StaticString) throws -> OpaquePointer {
        let key = UnsafeRawPointer(sql.utf8Start)
        for (literal, stmt) in literals where literal == key { return stmt }  // a few dozen: a scan beats a hash
        let stmt = try prepared(sql.description)
        literals.append((key, stmt))
        return stmt
    }

    private func prepared(_ sql: String) throws -> OpaquePointer {
        if let s = cache[sql] { return s }
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v3(db, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        guard rc == SQLITE_OK, let stmt else { throw error(rc) }
        cache[sql] = stmt
        return stmt
    }
}

enum SQLValue {
    case null
    case int(Int64)
    case text(String)
    /// Text given as its UTF-8 bytes (no String made for it).
    case utf8([UInt8])
    case blob([UInt8])
}

struct Row {
    let stmt: OpaquePointer
    func isNull(_ i: Int32) -> Bool { sqlite3_column_type(stmt, i) == SQLITE_NULL }
    func anyNull(_ columns: ClosedRange<Int32>) -> Bool { columns.contains(where: isNull) }
    func int(_ i: Int32) -> Int64 { sqlite3_column_int64(stmt, i) }
    /// The column's text, all of its bytes: a NUL within it (a custom handle may hold one)
    /// is kept, not taken for the end.
    func text(_ i: Int32) -> String {
        guard let p = sqlite3_column_text(stmt, i) else { return "" }
        return String(decoding: UnsafeBufferPointer(start: p, count: Int(sqlite3_column_bytes(stmt, i))), as: UTF8.self)
    }
    func blob(_ i: Int32) -> [UInt8] {
        let n = Int(sqlite3_column_bytes(stmt, i))
        guard n > 0, let p = sqlite3_column_blob(stmt, i) else { return [] }
        return Array(UnsafeRawBufferPointer(start: p, count: n))
    }
}
