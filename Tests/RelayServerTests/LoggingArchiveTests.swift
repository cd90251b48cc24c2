// Failures of the core's reads reach the relay's log, damage and other failures each once
// a minute at most; successful reads do not.

import Foundation
import RelayModel
import RelayProtocol
import Synchronization
import XCTest

@testable import RelayServer

final class LoggingArchiveTests: XCTestCase {
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

    func testFailuresAreLoggedOnceAMinuteAndPassedOn() throws {
        let inner = Failing()
        let lines = Mutex<[String]>([])
        let now = Mutex<Int64>(0)
        let archive = LoggingArchive(
            inner, log: Log { line in lines.withLock { $0.append(line) } }, monotonicMillis: { now.withLock { $0 } })
        let id = QuestionID(high: 1, low: 2)
        XCTAssertNil(try archive.question(id))
        XCTAssertEqual(lines.withLock { $0 }, [])
        inner.failure = ReadError(isDamaged: false)  // an I/O error, say: it may pass, or not
        XCTAssertThrowsError(try archive.question(id)) { XCTAssertTrue(($0 as? ReadError)?.isDamaged == false, "passed on") }
        XCTAssertThrowsError(try archive.question(id))
        XCTAssertEqual(lines.withLock { $0.count }, 1, "once a minute")
        let failed = lines.withLock { $0.first } ?? ""
        XCTAssertTrue(failed.contains("could not read question") && failed.contains("dmesg"), failed)

        inner.failure = ReadError(isDamaged: true)
        XCTAssertThrowsError(try archive.question(id)) { XCTAssertTrue(($0 as? ReadError)?.isDamaged == true, "passed on") }
        XCTAssertThrowsError(try archive.questions(of: "c1", status: nil, newestFirst: true, after: nil, limit: 10))
        XCTAssertEqual(lines.withLock { $0.count }, 2, "damage once a minute, beside the other failure")
        let line = lines.withLock { $0.last } ?? ""
        XCTAssertTrue(line.contains("the store is damaged: question") && line.contains("permission-relay check"), line)
        now.withLock { $0 = LoggingArchive.quietMillis }
        XCTAssertThrowsError(try archive.questions(of: "c1", status: nil, newestFirst: true, after: nil, limit: 10))
        XCTAssertEqual(lines.withLock { $0.count }, 3)
        XCTAssertTrue(lines.withLock { $0.last }?.contains("c1's questions cannot be read") == true)
    }
}
