// The append-only file where each commit lands as one record: one write() of exactly
// its bytes, however small, where a database commit would rewrite whole pages.
//
// Layout: an 8-byte magic and an 8-byte generation, then records of
// [payload length: UInt32 LE][checksum of the payload: UInt32 LE][payload]. The magic
// names the checksum's version: a file goes on with the version it was started with.
// The store keeps two such files and writes one generation into each in turn; a
// checkpoint writes a generation's records into the database and records the generation
// there in the same transaction, so a file whose generation the database already holds
// is known to be applied and may start over. Reading stops at the first record that is
// short or fails its checksum (a write cut off by a crash or a full disk), and the file
// is cut back to the last whole record.
//
// A file starts over by having its header written again, not by being emptied: emptying
// a file of tens of megabytes took the loop most of a millisecond, and every generation
// then wrote into newly allocated pages. What the generation before left after the new
// records is never read as theirs: from version 3 the checksum is seeded with the
// generation, so the first old record fails it and ends the file.

import Glibc

final class JournalFile {
    /// The magic of each checksum version, from 1; files are started with the last.
    private static let magics: [[UInt8]] = [Array("PRJOURN1".utf8), Array("PRJOURN2".utf8), Array("PRJOURN3".utf8)]
    private static let headerBytes = 16
    /// What a record's length and checksum take before its payload.
    static let recordHeaderBytes = 8

    let path: String
    private let fd: Int32
    private let syncEveryAppend: Bool
    private let limitBytes: Int?
    /// Where the next record goes.
    private(set) var end: Int = 0
    private(set) var generation: Int64 = 0
    /// The checksum version of the file's records.
    private(set) var version = JournalFile.magics.count

    /// Opens (creating) the file. `limitBytes` makes it act full past that size (tests).
    init(path: String, syncEveryAppend: Bool, limitBytes: Int?) throws {
        self.path = path
        self.syncEveryAppend = syncEveryAppend
        self.limitBytes = limitBytes
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Self.failure("could not open", path) }
    }

    deinit { close(fd) }

    /// The file's generation and whole records; nil when it is empty or not a journal.
    func read() throws -> (generation: Int64, records: [[UInt8]])? {
        let size = Int(lseek(fd, 0, SEEK_END))
        var bytes = [UInt8](repeating: 0, count: max(0, size))
        var got = 0
        while got < bytes.count {
            let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + got, $0.count - got, off_t(got)) }
            guard n > 0 else { throw Self.failure("could not read", path) }
            got += n
        }
        guard bytes.count >= Self.headerBytes, let found = Self.magics.firstIndex(of: Array(bytes[0..<8])) else { return nil }
        version = found + 1
        generation = Self.load(UInt64.self, bytes, 8).map { Int64(bitPattern: $0) } ?? 0
        var records: [[UInt8]] = []
        var at = Self.headerBytes
        while let length = Self.load(UInt32.self, bytes, at).map(Int.init), let sum = Self.load(UInt32.self, bytes, at + 4),
            at + 8 + length <= bytes.count
        {
            let payload = Array(bytes[(at + 8)..<(at + 8 + length)])
            guard payload.withUnsafeBytes({ Checksum.of($0, version: version, generation: generation) }) == sum else { break }
            records.append(payload)
            at += 8 + length
        }
        end = at
        if at < bytes.count, ftruncate(fd, off_t(at)) != 0 { throw Self.failure("could not cut the torn end of", path) }
        return (generation, records)
    }

    /// Appends one record: `record` holds its payload after `recordHeaderBytes` bytes kept
    /// for the header, which is filled in here (so a large commit is never copied). On
    /// failure the file is left as it was.
    func append(record: UnsafeMutableBufferPointer<UInt8>) throws {
        let payload = record.count - Self.recordHeaderBytes
        let bytes = UnsafeMutableRawBufferPointer(record)
        let sum = Checksum.of(UnsafeRawBufferPointer(rebasing: bytes[Self.recordHeaderBytes...]), version: version, generation: generation)
        bytes.storeBytes(of: UInt32(payload).littleEndian, toByteOffset: 0, as: UInt32.self)
        bytes.storeBytes(of: sum.littleEndian, toByteOffset: 4, as: UInt32.self)
        if let limitBytes, end + record.count > limitBytes {
            throw SQLiteError(code: 13, message: "the journal \(path) is full (limit \(limitBytes) bytes)")
        }
        do {
            try write(UnsafeRawBufferPointer(bytes), at: end)
            if syncEveryAppend, fdatasync(fd) != 0 { throw Self.failure("could not sync", path) }
        } catch {
            _ = ftruncate(fd, off_t(end))
            throw error
        }
        end += record.count
    }

    /// Starts `generation` at the front of the file (once the database holds what it held),
    /// over what is there: see the top of the file.
    func startOver(generation: Int64) throws {
        var header = Self.magics[Self.magics.count - 1]
        withUnsafeBytes(of: UInt64(bitPattern: generation).littleEndian) { header.append(contentsOf: $0) }
        try header.withUnsafeBytes { try write($0, at: 0) }
        if syncEveryAppend, fsync(fd) != 0 { throw Self.failure("could not sync", path) }
        self.generation = generation
        version = Self.magics.count
        end = header.count
    }

    private func write(_ bytes: UnsafeRawBufferPointer, at offset: Int) throws {
        var done = 0
        while done < bytes.count {
            let n = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset + done))
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw Self.failure("could not write", path) }
            done += n
        }
    }

    private static func load<T: FixedWidthInteger>(_: T.Type, _ bytes: [UInt8], _ at: Int) -> T? {
        guard at >= 0, at + MemoryLayout<T>.size <= bytes.count else { return nil }
        var v: T = 0
        withUnsafeMutableBytes(of: &v) { $0.copyBytes(from: bytes[at..<(at + MemoryLayout<T>.size)]) }
        return T(littleEndian: v)
    }

    /// An error for a failed system call, as a store error (a full disk reads as full).
    private static func failure(_ what: String, _ path: String) -> SQLiteError {
        let e = errno
        return SQLiteError(code: e == ENOSPC || e == EDQUOT ? 13 : 10, message: "\(what) \(path): \(String(cString: strerror(e)))")
    }
}

/// A 32-bit digest to tell a whole record from one cut off or damaged; not for
/// security. Version 1 is FNV-1a over 8-byte words, one after another, each multiply
/// waiting for the one before; version 2 runs four such lanes side by side, whose
/// multiplies overlap, and folds them together with the length; version 3 also folds in
/// the file's generation.
enum Checksum {
    private static let prime: UInt64 = 0x100_0000_01B3
    private static let basis: UInt64 = 0xCBF2_9CE4_8422_2325

    static func of(_ raw: UnsafeRawBufferPointer, version: Int, generation: Int64) -> UInt32 {
        var h = basis
        var i = 0
        if version >= 2 {
            var lanes = (basis, basis ^ 1, basis ^ 2, basis ^ 3)
            while i + 32 <= raw.count {
                lanes.0 = (lanes.0 ^ raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)) &* prime
                lanes.1 = (lanes.1 ^ raw.loadUnaligned(fromByteOffset: i + 8, as: UInt64.self)) &* prime
                lanes.2 = (lanes.2 ^ raw.loadUnaligned(fromByteOffset: i + 16, as: UInt64.self)) &* prime
                lanes.3 = (lanes.3 ^ raw.loadUnaligned(fromByteOffset: i + 24, as: UInt64.self)) &* prime
                i += 32
            }
            h = (((lanes.0 ^ lanes.1) &* prime ^ lanes.2) &* prime ^ lanes.3) &* prime
            h = (h ^ UInt64(raw.count)) &* prime
            if version >= 3 { h = (h ^ UInt64(bitPattern: generation)) &* prime }
        }
        while i + 8 <= raw.count {
            h = (h ^ raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)) &* prime
            i += 8
        }
        while i < raw.count {
            h = (h ^ UInt64(raw[i])) &* prime
            i += 1
        }
        return UInt32(truncatingIfNeeded: h ^ (h >> 32))
    }
}
