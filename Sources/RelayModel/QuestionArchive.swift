// Where the core reads the questions it does not keep in memory. The core holds what is
// live (pending questions, and finished ones until what finished them is committed);
// everything else is read back from the store when a request needs it: a resent or
// re-asked id, an answer or a cancel of a finished question, a list of questions.

import RelayProtocol

/// A question's place in a list: by when it was first asked, ties by its row (rows are
/// given in order of first asking).
public struct QuestionPlace: Comparable, Sendable {
    public let createdAt: Int64
    public let row: Int64

    public init(createdAt: Int64, row: Int64) {
        self.createdAt = createdAt
        self.row = row
    }

    public init(_ q: QuestionRecord) { self.init(createdAt: q.createdAt.milliseconds, row: q.row) }

    public static func < (a: QuestionPlace, b: QuestionPlace) -> Bool { (a.createdAt, a.row) < (b.createdAt, b.row) }
}

/// An error of a store that can tell damage on disk, which no retry mends, from a
/// failure that may pass (a busy or full disk).
public protocol StoreReadError: Error {
    var isDamaged: Bool { get }
}

/// The questions a store holds, read on the loop's thread between turns. It sees what is
/// committed: the core asks it only for questions it does not hold, and it holds every
/// question whose latest change is not committed yet.
public protocol QuestionArchive: AnyObject {
    /// The stored question with this id, whatever its status.
    func question(_ id: QuestionID) throws -> QuestionRecord?

    /// Up to `limit` stored questions of `child` in list order (`newestFirst`, else oldest
    /// first), strictly after `after` in that order, only those with `status` when given.
    func questions(of child: String, status: QuestionStatus?, newestFirst: Bool, after: QuestionPlace?, limit: Int) throws
        -> [QuestionRecord]
}
