@testable import RelayCore
import RelayProtocol
import RelayModel
import RelayStore
import XCTest

final class QuestionTableTests: XCTestCase {
    private func record(_ n: Int) throws -> QuestionRecord {
        let q: JSONObject = [
            "id": .string(String(format: "00000000-0000-4000-8000-%012d", n)),
            "topic": .object(["kind": "significantAppUpdate", "description": .string("update \(n)")]),
        ]
        return QuestionRecord(
            content: try QuestionContent.validate(q, now: Timestamp(milliseconds: 0)), child: "c\(n % 3)", family: "f",
            status: .pending, attempt: 1, createdAt: Timestamp(milliseconds: Int64(n)))
    }

    func testHoldsTheLastRecordWrittenForEachIdThroughGrowth() throws {
        var table = QuestionTable()
        var expected: [QuestionID: QuestionRecord] = [:]
        for n in 0..<3000 {  // past several doublings
            var r = try record(n)
            table.save(r)
            expected[r.key] = r
            r.attempt = 2
            switch n % 3 {
            case 0:  // saved again in place of the first
                table.save(r)
                expected[r.key] = r
            case 1:  // changed through its entry
                let entry = try XCTUnwrap(table.entry(r.key))
                entry.record.status = .answered
                expected[r.key]?.status = .answered
            default: break
            }
            if n % 5 == 0 {
                let gone = try record(n / 2).key
                table.removeValue(forKey: gone)
                expected[gone] = nil
            }
        }
        XCTAssertEqual(table.count, expected.count)
        for n in 0..<3000 {
            let key = try record(n).key
            XCTAssertEqual(table[key], expected[key], "question \(n)")
            XCTAssertEqual(table.entry(key)?.record.status, expected[key]?.status, "question \(n)")
            XCTAssertEqual(table.entry(key)?.record, expected[key], "question \(n)")
        }
    }

    /// Ids that differ only in a counter, as a client may choose them, spread over the
    /// shards: none holds more than twice its share, so none grows much ahead of the others.
    func testIdsCountingUpSpreadOverTheShards() throws {
        var table = QuestionTable()
        let n = 25_600
        for k in 0..<n { table.save(try record(k)) }
        XCTAssertEqual(table.count, n)
        XCTAssertLessThanOrEqual(table.largestShardCount, 2 * n / 256)
    }
}
