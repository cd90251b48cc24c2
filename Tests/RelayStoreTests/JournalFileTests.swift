import Foundation
@testable import RelayStore
import XCTest

final class JournalFileTests: XCTestCase {
    private var path: String!

    override func setUp() {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("journal-file-\(UUID().uuidString)").path
    }

    override func tearDown() { try? FileManager.default.removeItem(atPath: path) }

    private func append(_ payload: [UInt8], to journal: JournalFile) throws {
        var record = [UInt8](repeating: 0, count: JournalFile.recordHeaderBytes) + payload
        try record.withUnsafeMutableBufferPointer { try journal.append(record: $0) }
    }

    private func size() throws -> Int { try FileManager.default.attributesOfItem(atPath: path)[.size] as! Int }

    func testAFileOfTheFirstVersionIsReadAndGoesOnInIt() throws {
        // Written as a relay of the first version wrote it; 972164052 is that version's
        // checksum of this payload.
        let first = Array("a record of the first version".utf8)
        var bytes = Array("PRJOURN1".utf8)
        for v in [UInt64(7), UInt64(first.count) | UInt64(972_164_052) << 32] {
            withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) }
        }
        bytes += first
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(bytes)))

        let journal = try JournalFile(path: path, syncEveryAppend: false, limitBytes: nil)
        let read = try XCTUnwrap(try journal.read())
        XCTAssertEqual(read.generation, 7)
        XCTAssertEqual(read.records, [first])
        XCTAssertEqual(journal.version, 1)
        let second = Array(repeating: UInt8(9), count: 100)
        try append(second, to: journal)
        XCTAssertEqual(try JournalFile(path: path, syncEveryAppend: false, limitBytes: nil).read()?.records, [first, second])

        try journal.startOver(generation: 8)
        XCTAssertEqual(journal.version, 3, "a file started over takes the current version")
        try append(second, to: journal)
        let reread = try JournalFile(path: path, syncEveryAppend: false, limitBytes: nil)
        XCTAssertEqual(try reread.read()?.records, [second])
        XCTAssertEqual(reread.version, 3)
    }

    /// A file starts over without being emptied: the records of the generation before
    /// that lie after the new ones, whole and as long as them, are not read as the new
    /// generation's, and are cut off when the file is read.
    func testAFileStartedOverReadsNoRecordOfTheGenerationBefore() throws {
        let old = (0..<4).map { n in [UInt8](repeating: UInt8(n), count: 200) }
        let journal = try JournalFile(path: path, syncEveryAppend: false, limitBytes: nil)
        try journal.startOver(generation: 1)
        for r in old { try append(r, to: journal) }
        let full = try size()

        try journal.startOver(generation: 3)
        XCTAssertEqual(try size(), full, "not emptied")
        XCTAssertEqual(try JournalFile(path: path, syncEveryAppend: false, limitBytes: nil).read()?.records, [])
        XCTAssertEqual(try size(), 16, "what follows the header is cut off when read")

        let again = try JournalFile(path: path, syncEveryAppend: false, limitBytes: nil)
        _ = try again.read()
        for r in old { try append(r, to: again) }
        try again.startOver(generation: 5)
        let new = [UInt8](repeating: 7, count: 200)
        try append(new, to: again)
        let read = try XCTUnwrap(try JournalFile(path: path, syncEveryAppend: false, limitBytes: nil).read())
        XCTAssertEqual(read.generation, 5)
        XCTAssertEqual(read.records, [new], "the three old records after it are another generation's")
        XCTAssertEqual(try size(), 16 + JournalFile.recordHeaderBytes + new.count)
    }

    func testATornOrDamagedRecordEndsTheFile() throws {
        let records = (0..<3).map { n in (0..<(70 + n)).map { UInt8(truncatingIfNeeded: $0 * 31 + n) } }  // lanes and a tail
        for damage in [nil, 0, 13, 22, 31, 45, 68] as [Int?] {  // each lane, and the tail
            let journal = try JournalFile(path: path, syncEveryAppend: false, limitBytes: nil)
            try journal.startOver(generation: 1)
            for r in records { try append(r, to: journal) }
            let whole = try size()
            let handle = try XCTUnwrap(FileHandle(forUpdatingAtPath: path))
            let lastStart = UInt64(whole - records[2].count)
            if let damage {  // one byte of the last payload changed
                try handle.seek(toOffset: lastStart + UInt64(damage))
                let old = try XCTUnwrap(try handle.read(upToCount: 1)).first!
                try handle.seek(toOffset: lastStart + UInt64(damage))
                try handle.write(contentsOf: [old ^ 0x10])
            } else {  // the last write cut short
                try handle.truncate(atOffset: UInt64(whole - 3))
            }
            try handle.close()
            XCTAssertEqual(
                try JournalFile(path: path, syncEveryAppend: false, limitBytes: nil).read()?.records, Array(records.prefix(2)),
                "damage at \(damage.map(String.init) ?? "the end")")
            XCTAssertEqual(try size(), whole - records[2].count - JournalFile.recordHeaderBytes, "cut back to the last whole record")
        }
    }
}
