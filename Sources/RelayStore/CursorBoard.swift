// Where the loop posts each cursor an ack moves, for the table writer on its own thread.
// Cursors are journaled lazily (an ack lost in a crash costs only events sent again), so
// the cursors in a batch are at best those of when it was handed over; by the time it is
// written, most of its events have been acknowledged. The writer takes the posts, leaves
// out what every durable session has acknowledged since, and stores those cursors with it.
//
// Posting only appends to a list under the lock: filing a post by member and session
// hashes two strings, which the writer does when it takes them, off the loop's thread.

import Synchronization

final class CursorBoard: Sendable {
    /// One post, in the order the loop made them.
    enum Post {
        /// `session` of `member` has acknowledged everything up to `cursor`.
        case cursor(member: String, session: String, cursor: Int64)
        /// `member`'s sessions (or only `session`) were dropped: what was posted for them
        /// before goes.
        case forget(member: String, session: String?)
    }

    private let posts = Mutex<[Post]>([])

    func post(member: String, session: String, cursor: Int64) {
        posts.withLock { $0.append(.cursor(member: member, session: session, cursor: cursor)) }
    }

    func forget(member: String, session: String? = nil) {
        posts.withLock { $0.append(.forget(member: member, session: session)) }
    }

    /// Swaps the posts made since the last call into `taken`, whose buffer (emptied) the
    /// loop posts into next, so that neither side allocates one per batch.
    func take(into taken: inout [Post]) {
        taken.removeAll(keepingCapacity: true)
        posts.withLock { swap(&$0, &taken) }
    }
}

/// The cursors posted to a board, by member and session, as the writer files them.
struct PostedCursors {
    /// One dictionary keyed by both names: one lookup a post (hashing both in one go) where
    /// a dictionary of dictionaries took two.
    private struct Key: Hashable {
        let member: String
        let session: String
    }

    private var cursors: [Key: Int64] = [:]
    private var taken: [CursorBoard.Post] = []

    /// Files what was posted to `board` since the last call.
    mutating func file(from board: CursorBoard) {
        board.take(into: &taken)
        for post in taken {
            switch post {
            case .cursor(let member, let session, let cursor): cursors[Key(member: member, session: session)] = cursor
            case .forget(let member, nil): cursors = cursors.filter { $0.key.member != member }  // rare: a member removed
            case .forget(let member, let session?): cursors[Key(member: member, session: session)] = nil
            }
        }
    }

    /// The cursor last posted for `session` of `member`.
    subscript(member: String, session: String) -> Int64? { cursors[Key(member: member, session: session)] }
}
