import CSQLite
import Glibc

/// The number of pages of the SQLite database at `path` (tests cap a store just above it).
func pageCount(ofDatabaseAt path: String) -> Int {
    var db: OpaquePointer?
    sqlite3_open(path, &db)
    defer { sqlite3_close(db) }
    sqlite3_busy_timeout(db, 2000)  // a store just closed may still be checkpointing its WAL
    var pages: Int64 = 0
    sqlite3_exec(
        db, "PRAGMA page_count",
        { ctx, _, values, _ in
            ctx!.assumingMemoryBound(to: Int64.self).pointee = Int64(atoi(values![0]!))
            return 0
        }, &pages, nil)
    return Int(pages)
}
