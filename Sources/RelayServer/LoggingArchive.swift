// The store's questions as the core reads them, with every failed read logged: the core
// can only tell the client that asked, and the relay's operator must hear of it too.

import RelayModel
import RelayProtocol

final class LoggingArchive: QuestionArchive {
    private let store: any QuestionArchive
    private let log: Log
    private let monotonicMillis: () -> Int64
    /// When damage was last logged, and when another failure was.
    private var lastLogged: [Bool: Int64] = [:]

    /// A minute between two lines of a kind: each read of a damaged question fails alike.
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
            let damaged = (error as? StoreReadError)?.isDamaged == true
            let now = monotonicMillis()
            if lastLogged[damaged].map({ now - $0 >= Self.quietMillis }) ?? true {
                lastLogged[damaged] = now
                if damaged {
                    log(
                        .error,
                        "the store is damaged: \(what) cannot be read (\(error)); run `permission-relay check`, and restore a"
                            + " backup (docs/operations.md, \"A damaged store\")")
                } else {
                    // An I/O error from a failing disk looks like this too, and may not pass.
                    log(
                        .warning,
                        "could not read \(what) from the store (\(error)); the client was told to try again. If this"
                            + " goes on, look at the disk (`dmesg`) and run `permission-relay check`")
                }
            }
            throw error
        }
    }
}
