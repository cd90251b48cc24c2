// Moves the WAL's pages into the database on a thread and connection of its own, so that
// no commit waits for it. SQLite's own checkpoints run inside the commit that fills the
// WAL past 1000 pages: that commit, and every reply waiting for it, waited for two syncs
// and the copy of every page, which set the tail of the latency at a single family.
//
// A PASSIVE checkpoint neither waits for the writer and the readers nor holds them up: it
// copies what no reader still needs, and the writer starts the WAL again from its
// beginning at its first transaction after everything is copied. Under steady writing
// that moment never comes by itself: the writer appends while a checkpoint copies. So
// past `catchUpPages` the thread copies again whenever more than `writerTailPages` are
// left to copy, until what one of its checkpoints leaves is at most that; the writer
// copies that rest (a short checkpoint: its syncs are of that rest alone), and its next
// commit starts the WAL again, unless a reader still holds an older snapshot. Only should
// the writer outrun the thread all the same (the WAL past `hardLimitPages`, as when the
// thread gets too little of a busy CPU) does it copy whatever is left, as SQLite would:
// tens of milliseconds under load. The writer's checkpoints are decided in its commit
// but run once the commit's outcome is out (`SQLiteDatabase.setWALHook`), so that only
// the next commit waits for them (the whole loop, should it have committed a small batch
// itself).
// A checkpoint that fails (a full disk) is tried again after the next 1000 pages, as
// SQLite's own are (past `catchUpPages`, at the next commits); the commits themselves
// say what is wrong.
//
// A checkpoint syncs the database only when it copied the whole WAL, which under steady
// writing the thread's never do: the database's pages it copied stay unsynced until the
// writer's, whose sync then flushed them all while the next commit waited. So when what
// the thread's checkpoint leaves is the writer's to copy, the thread syncs the database
// first (an extra sync changes nothing SQLite relies on), and the writer's is of its rest.
// Only once, unless it copied `unsyncedPages` more since: the writer appends during the
// sync, so the rest may again be the thread's, and syncing each time would hold the
// writer's checkpoint off (on a slow disk, until the hard limit).
//
// The thread runs at a lower priority than the loop and the writer: its work can wait,
// theirs holds replies back, and on a contended core the scheduler would otherwise let
// it run in their place.

import CSQLite
import CSystem
import Foundation

final class WALCheckpointer: @unchecked Sendable {
    /// A checkpoint starts each time the WAL has this many pages more than the last one
    /// copied (SQLite's default).
    static let pages: Int32 = 1000
    /// Past this, the thread copies again whenever more than `writerTailPages` are left to
    /// copy, and the writer copies a shorter rest: the WAL starts again before `hardLimitPages`.
    /// Each time, the writer waits for two syncs, and so do the replies of its next commit:
    /// the longer the WAL may grow, the rarer that is under steady writing, and the fewer
    /// cycles' latency it sets (see performance.md), at the cost of its room on disk
    /// (`journal_size_limit`).
    static let catchUpPages: Int32 = 49152
    /// The most left to copy for the writer to copy it itself before
    /// `hardLimitPages` (as far as the last checkpoint says: a failed one is taken as done).
    static let writerTailPages: Int32 = 256
    /// Past this, the writer copies whatever is left, once its commit is done.
    static let hardLimitPages: Int32 = 65536

    let condition = NSCondition()
    // Guarded by `condition`.
    private var wanted = false
    private var stopping = false
    private var running = false
    /// A checkpoint of the writer's own waits for none to be under way here, and holds
    /// the next back: SQLite refuses a second checkpoint at once, busy timeout or not.
    private var paused = false
    private var checkpointing = false
    /// The writer's own checkpoint is decided or under way: the thread's would find SQLite busy.
    private var writerCheckpointing = false
    private var writerRuns = 0
    /// How long the WAL was after the last commit, in pages.
    private var walLength: Int32 = 0
    /// How much of the WAL the last checkpoint copied (or tried to), in pages.
    private var copied: Int32 = 0
    /// How long the WAL was when the last checkpoint was asked for.
    private var asked: Int32 = 0
    private var runCount = 0
    /// How much of the WAL the thread's last sync of the database covered (0: none since
    /// the WAL started again).
    private var syncedThrough: Int32 = 0
    /// Pages the thread copied and did not sync, past which it syncs the database before it
    /// leaves the rest to the writer.
    static let unsyncedPages: Int32 = 1024

    /// Checkpoints run, for tests to await.
    var runs: Int {
        condition.lock()
        defer { condition.unlock() }
        return runCount
    }

    /// Checkpoints the writer ran, for tests.
    var writerCheckpoints: Int {
        condition.lock()
        defer { condition.unlock() }
        return writerRuns
    }

    /// Its connection: opened here, so that a store that cannot open it fails to open and
    /// its descriptors are held before the relay serves; its thread's alone once started.
    private var db: SQLiteDatabase?
    /// The database file, for the thread's own syncs of it; the thread's alone once started.
    private var file: Int32 = -1

    init(path: String) throws {
        db = try SQLiteDatabase(path: path)
        file = open(path, O_RDONLY | O_CLOEXEC)
        // A connection opens the WAL at its first read; until then a checkpoint does nothing.
        _ = try db?.scalar("SELECT count(*) FROM sqlite_schema")
    }

    deinit { if file >= 0 { close(file) } }  // never started

    func start() {
        condition.lock()
        running = true
        condition.unlock()
        Thread { [self] in run() }.start()
    }

    /// Runs `body` (a checkpoint on another connection) with none under way here.
    func whileIdle<T>(_ body: () throws -> T) rethrows -> T {
        condition.lock()
        paused = true
        while checkpointing { condition.wait() }
        condition.unlock()
        defer {
            condition.lock()
            paused = false
            condition.broadcast()
            condition.unlock()
        }
        return try body()
    }

    /// A commit left the WAL `pages` long (SQLite's WAL hook, on the writer's thread).
    /// Returns whether the writer checkpoints, once the commit is done (`writerCheckpointed`
    /// then).
    func committed(walPages pages: Int32) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        // Shorter than after the last commit, or than what was copied: it started again.
        if pages < walLength || pages < copied { (copied, syncedThrough) = (0, 0) }
        walLength = pages
        guard pages >= Self.pages else { return false }
        if pages >= Self.hardLimitPages || (restIsWriters && !checkpointing) {
            writerCheckpointing = true
            wanted = false
            return true
        }
        if pages - copied >= Self.pages || (pages >= Self.catchUpPages && !restIsWriters) {
            wanted = true
            asked = pages
            condition.signal()
        }
        return false
    }

    /// Whether what is left to copy is the writer's to copy: past the mark, and at
    /// most `writerTailPages` (guarded by `condition`).
    private var restIsWriters: Bool { leavesRestToWriter(copied: copied) }

    /// Whether a checkpoint of the thread's that copied the WAL's first `done` pages leaves
    /// the rest to the writer (called with `condition` held).
    func leavesRestToWriter(copied done: Int32) -> Bool {
        walLength >= Self.catchUpPages && walLength - max(copied, done) <= Self.writerTailPages
    }

    /// Whether the thread syncs the database after a checkpoint of its own that copied the
    /// WAL's first `done` pages: it leaves the rest to the writer, and more than
    /// `unsyncedPages` of what it copied are not synced yet (called with `condition` held).
    func syncsBeforeLeavingRest(copied done: Int32) -> Bool {
        guard leavesRestToWriter(copied: done), done - syncedThrough > Self.unsyncedPages else { return false }
        syncedThrough = done
        return true
    }

    /// The thread takes the checkpoint asked for, unless what its last one left is for the
    /// writer to copy now (see above). Called with `condition` held.
    func beginsCheckpoint() -> Bool {
        wanted = false
        if restIsWriters { return false }
        checkpointing = true
        return true
    }

    /// The thread's checkpoint copied the WAL's first `done` pages (nil: it failed, and is
    /// taken as done, to be tried again later). Called with `condition` held.
    func endsCheckpoint(copied done: Int32?) {
        copied = max(copied, done ?? asked)
        runCount += 1
        checkpointing = false
        condition.broadcast()
    }

    /// Whether a checkpoint is asked of the thread, for tests.
    var threadAsked: Bool {
        condition.lock()
        defer { condition.unlock() }
        return wanted
    }

    /// The writer's checkpoint has `copied` the WAL's first pages (-1: none).
    func writerCheckpointed(through copied: Int32) {
        condition.lock()
        writerCheckpointing = false
        writerRuns += 1
        self.copied = max(self.copied, copied)
        condition.broadcast()
        condition.unlock()
    }

    /// Waits until more than `count` checkpoints have run, for at most `seconds`.
    func awaitRuns(moreThan count: Int, seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        condition.lock()
        defer { condition.unlock() }
        while runCount <= count && condition.wait(until: deadline) {}
        return runCount > count
    }

    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        while running { condition.wait() }
        condition.unlock()
    }

    /// How much the thread's nice value is above the process's.
    static let niceness: Int32 = 10

    private func run() {
        _ = cs_lower_thread_priority(Self.niceness)  // before its name: a test knows the thread by it
        _ = cs_name_thread("checkpointer")  // as `top -H` and `perf` show it
        condition.lock()
        while true {
            while (!wanted || paused || writerCheckpointing) && !stopping { condition.wait() }
            if stopping { break }
            guard beginsCheckpoint() else { continue }
            condition.unlock()
            // Fails on a full disk (or busy, should another connection checkpoint meanwhile).
            let done = try? db?.checkpoint(mode: SQLITE_CHECKPOINT_PASSIVE)
            condition.lock()
            if let done, file >= 0, syncsBeforeLeavingRest(copied: done) {
                // Still `checkpointing`: the writer's checkpoint waits for this sync, not its
                // commits. A failure is SQLite's to see: the kernel reports a write error to
                // every open description of the file, so its own sync fails too.
                condition.unlock()
                _ = fdatasync(file)
                condition.lock()
            }
            endsCheckpoint(copied: done)
        }
        db = nil  // closed before the store goes on without it
        if file >= 0 { close(file) }
        file = -1
        running = false
        condition.broadcast()
        condition.unlock()
    }
}
