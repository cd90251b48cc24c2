// The store's questions as the core reads them, with damage on disk logged: the core can
// only tell the client that asked, and the relay's operator must hear of it too.

import RelayModel
import RelayProtocol

final class DamageLoggingArchive: QuestionArchive {
    private let store: any QuestionArchive
    private let log: Log
    private let monotonicMillis: () -> Int64
    private var lastLogged: Int64?

    /// A minute between two such lines: each read of a damaged question fails alike.
    static let quietMillis: Int64 = 60_000

    init(_ store: any QuestionArchive, log: Log, monotonicMillis: @escaping () -> Int64) {
        (self.store, self.log, self.monotonicMillis) = (store, log, monotonicMillis)
    }

    func question(_ id: QuestionID) throws -> QuestionRecord? {
        try logged("question \(id)") { try store.question(id) }
    }

    func questions(of child: String, status: QuestionStatus?, newestFirst: Bool, after: QuestionPlace?, limit: Int) throws
        -> [QuestionRecord]
    {
        try logged("\(child)'s questions") {
            try store.questions(of: child, status: status, newestFirst: newestFirst, after: after, limit: limit)
        }
    }

    private func logged<T>(_ what: String, _ read: () throws -> T) throws -> T {
        do {
            return try read()
        } catch {
            let now = monotonicMillis()
            if (error as? StoreReadError)?.isDamaged == true, lastLogged.map({ now - $0 >= Self.quietMillis }) ?? true {
                lastLogged = now
                log(
                    .error,
                    "the store is damaged: \(what) cannot be read (\(error)); run `permission-relay check`, and restore a"
                        + " backup (docs/operations.md, \"A damaged store\")")
            }
            throw error
        }
    }
}
