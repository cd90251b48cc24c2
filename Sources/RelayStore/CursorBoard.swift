// Where the loop posts each cursor an ack moves, for the table writer on its own thread.
// Cursors are journaled lazily (an ack lost in a crash costs only events sent again), so
// the cursors in a batch are at best those of when it was handed over; by the time it is
// written, most of its events have been acknowledged. The writer reads the board, leaves
// out what every durable session has acknowledged since, and stores those cursors with it.

import Synchronization

final class CursorBoard: Sendable {
    private let cursors = Mutex<[String: [String: Int64]]>([:])

    /// Records that `session` of `member` has acknowledged everything up to `cursor`.
    func post(member: String, session: String, cursor: Int64) {
        cursors.withLock { $0[member, default: [:]][session] = cursor }
    }

    /// The cursors posted for `member`'s sessions, by session name.
    func cursors(of member: String) -> [String: Int64]? {
        cursors.withLock { $0[member] }
    }

    /// Forgets `member`'s sessions (they are dropped).
    func forget(member: String) {
        cursors.withLock { $0[member] = nil }
    }
}
