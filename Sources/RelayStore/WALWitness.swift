// Whether the WAL still holds every commit its index says it held, checked before SQLite
// opens the database. After a crash SQLite rebuilds the index (`-shm`) from the WAL,
// keeping the frames up to the first one whose checksum fails, and a missing WAL is
// simply a new, empty one: either way commits acknowledged to clients would be gone
// without a word, and the seqs they took given again. The index, left as the crashed
// process last wrote it, says how many frames the WAL held; SQLite's first connection
// overwrites it, so it is read here first.
//
// The formats read are SQLite's own, as https://www.sqlite.org/walformat.html and
// https://www.sqlite.org/fileformat2.html#the_write_ahead_log describe them.

import Foundation
import Glibc

enum WALWitness {
    /// What the WAL beside the database at `path` has lost of what its index says it held,
    /// in one line naming the file and what to do; nil when nothing is lost, or when there
    /// is nothing to tell by (no index; one that may predate the machine's last start, after
    /// which SQLite's `synchronous=NORMAL` may lose the newest commits by design; or one that
    /// changes while it is read: a relay is using the store).
    static func loss(at path: String) -> String? {
        guard let index = Index(path + "-shm"), index.frames > index.backfilled, !index.mayPredateBoot else { return nil }
        let verdict = readable(path + "-wal", index: index)
        guard Index(path + "-shm") == index else { return nil }  // live: being written meanwhile
        let unapplied = "\(index.frames - index.backfilled) pages of changes not yet in \(path)"
        let restore = "restore a backup (permission-relay restore)"
        switch verdict {
        case .missing:
            return "\(path)-wal is missing, but \(path)-shm says it held \(unapplied): they are lost. Put the WAL back, or"
                + " \(restore); to go on without those changes, remove \(path)-shm and start again"
        case .otherLog:
            // SQLite would replay it as it is, were the index gone: it goes too.
            return "\(path)-wal is not the WAL \(path)-shm describes, which held \(unapplied). Put the right WAL back, or"
                + " \(restore); to go on without those changes, move both \(path)-wal and"
                + " \(path)-shm aside and start again"
        case .frames(let valid) where valid < index.frames:
            return "\(path)-wal is damaged: SQLite can read only \(valid) of the \(index.frames) pages it held when the"
                + " relay last ran, so changes already acknowledged would be lost: \(restore), or, to go on with what can"
                + " be read, remove \(path)-shm and start again"
        case .frames:
            return nil
        }
    }

    /// The WAL index's header (both copies alike) and how much of the WAL is in the database.
    struct Index: Equatable {
        var frames: UInt32
        var backfilled: UInt32
        /// The database's size in pages as of the last commit the index describes.
        var pages: UInt32
        var pageSize: Int
        var salt: [UInt8]
        var change: UInt32
        /// Written before the machine last started, or at a time the clock has not reached
        /// yet (set back since: a machine without a clock of its own may start at a saved time).
        var mayPredateBoot: Bool

        init?(_ path: String) {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return nil }
            defer { close(fd) }
            var bytes = [UInt8](repeating: 0, count: 136)
            guard pread(fd, &bytes, bytes.count, 0) == bytes.count else { return nil }
            // WalIndexHdr, twice: iVersion, unused, iChange, isInit, bigEndCksum, szPage,
            // mxFrame, nPage, aFrameCksum[2], aSalt[2], aCksum[2]; in the machine's order.
            guard bytes[0..<48] == bytes[48..<96], bytes[12] == 1, Self.word(bytes, 0) == 3_007_000 else { return nil }
            change = Self.word(bytes, 8)
            let size = bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 14, as: UInt16.self) }
            pageSize = size == 1 ? 65536 : Int(size)
            frames = Self.word(bytes, 16)
            pages = Self.word(bytes, 20)
            salt = Array(bytes[32..<40])
            backfilled = Self.word(bytes, 96)  // WalCkptInfo.nBackfill
            var st = stat()
            let written = fstat(fd, &st) == 0 ? st.st_mtim.tv_sec : 0
            mayPredateBoot = Self.bootTime.map { written < $0 } ?? false || written > time(nil)
        }

        static func word(_ bytes: [UInt8], _ at: Int) -> UInt32 {
            bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: UInt32.self) }
        }

        /// When the machine started (`btime` in /proc/stat), in seconds since the epoch.
        static var bootTime: Int? {
            guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8) else { return nil }
            return stat.split(separator: "\n").first { $0.hasPrefix("btime ") }.flatMap { Int($0.dropFirst(6)) }
        }
    }

    enum Verdict {
        case missing
        case otherLog
        /// How many of its first frames SQLite's recovery keeps: up to the last commit
        /// frame before the first frame whose salt or checksum does not match.
        case frames(UInt32)
    }

    /// Reads the WAL's first `index.frames` frames as SQLite's recovery does.
    static func readable(_ path: String, index: Index) -> Verdict {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .missing }
        defer { close(fd) }
        var header = [UInt8](repeating: 0, count: 32)
        guard pread(fd, &header, 32, 0) == 32 else { return .frames(0) }
        let magic = bigEndian(header, 0)
        guard magic & ~1 == 0x377f_0682, Array(header[16..<24]) == index.salt,
            Int(bigEndian(header, 8)) == index.pageSize
        else { return .otherLog }
        let wordsBigEndian = magic & 1 == 1
        var sums = checksum(header[0..<24], wordsBigEndian: wordsBigEndian, from: (0, 0))
        guard sums == (bigEndian(header, 24), bigEndian(header, 28)) else { return .frames(0) }
        var frame = [UInt8](repeating: 0, count: 24 + index.pageSize)
        var committed: UInt32 = 0
        for n in 0..<index.frames {
            let at = off_t(32 + Int(n) * frame.count)
            guard pread(fd, &frame, frame.count, at) == frame.count, bigEndian(frame, 0) != 0, Array(frame[8..<16]) == index.salt
            else { break }
            sums = checksum(frame[0..<8], wordsBigEndian: wordsBigEndian, from: sums)
            sums = checksum(frame[24...], wordsBigEndian: wordsBigEndian, from: sums)
            guard sums == (bigEndian(frame, 16), bigEndian(frame, 20)) else { break }
            if bigEndian(frame, 4) != 0 { committed = n + 1 }  // a commit frame: the database's size after it
        }
        return .frames(committed)
    }

    /// SQLite's WAL checksum over `bytes` (a multiple of 8), continuing from `sums`.
    static func checksum(_ bytes: ArraySlice<UInt8>, wordsBigEndian: Bool, from sums: (UInt32, UInt32)) -> (UInt32, UInt32) {
        var (s0, s1) = sums
        bytes.withUnsafeBytes { raw in
            for i in stride(from: 0, to: raw.count, by: 8) {
                var x0 = raw.loadUnaligned(fromByteOffset: i, as: UInt32.self)
                var x1 = raw.loadUnaligned(fromByteOffset: i + 4, as: UInt32.self)
                if wordsBigEndian {
                    (x0, x1) = (UInt32(bigEndian: x0), UInt32(bigEndian: x1))
                } else {
                    (x0, x1) = (UInt32(littleEndian: x0), UInt32(littleEndian: x1))
                }
                s0 = s0 &+ x0 &+ s1
                s1 = s1 &+ x1 &+ s0
            }
        }
        return (s0, s1)
    }

    static func bigEndian(_ bytes: [UInt8], _ at: Int) -> UInt32 {
        bytes.withUnsafeBytes { UInt32(bigEndian: $0.loadUnaligned(fromByteOffset: at, as: UInt32.self)) }
    }
}
