// Damage on disk met by the core's reads reaches the relay's log, once a minute at most;
// other failures and successful reads do not.

import Foundation
import RelayModel
import RelayProtocol
import Synchronization
import XCTest

@testable import RelayServer

final class DamageLoggingArchiveTests: XCTestCase {
    struct ReadError: StoreReadError {
        let isDamaged: Bool
    }

    /// An archive whose reads fail with `failure` while it is set.
    final class Failing: QuestionArchive {
        var failure: (any Error)?
        func question(_ id: QuestionID) throws -> QuestionRecord? {
            if let failure { throw failure }
            return nil
        }
        func questions(of child: String, status: QuestionStatus?, newestFirst: Bool, after: QuestionPlace?, limit: Int) throws
            -> [QuestionRecord]
        {
            if let failure { throw failure }
            return []
        }
    }

    func testDamageIsLoggedOnceAMinuteAndPassedOn() throws {
        let inner = Failing()
        let lines = Mutex<[String]>([])
        let now = Mutex<Int64>(0)
        let archive = DamageLoggingArchive(
            inner, log: Log { line in lines.withLock { $0.append(line) } }, monotonicMillis: { now.withLock { $0 } })
        let id = QuestionID(high: 1, low: 2)
        XCTAssertNil(try archive.question(id))
        inner.failure = ReadError(isDamaged: false)  // a busy disk, say: it may pass
        XCTAssertThrowsError(try archive.question(id))
        XCTAssertEqual(lines.withLock { $0 }, [])

        inner.failure = ReadError(isDamaged: true)
        XCTAssertThrowsError(try archive.question(id)) { XCTAssertTrue(($0 as? ReadError)?.isDamaged == true, "passed on") }
        XCTAssertThrowsError(try archive.questions(of: "c1", status: nil, newestFirst: true, after: nil, limit: 10))
        XCTAssertEqual(lines.withLock { $0.count }, 1, "once a minute")
        let line = lines.withLock { $0.first } ?? ""
        XCTAssertTrue(line.contains("the store is damaged: question") && line.contains("permission-relay check"), line)
        now.withLock { $0 = DamageLoggingArchive.quietMillis }
        XCTAssertThrowsError(try archive.questions(of: "c1", status: nil, newestFirst: true, after: nil, limit: 10))
        XCTAssertEqual(lines.withLock { $0.count }, 2)
        XCTAssertTrue(lines.withLock { $0.last }?.contains("c1's questions cannot be read") == true)
    }
}
