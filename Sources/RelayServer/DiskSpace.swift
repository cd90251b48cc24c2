// The free space of the data directory's file system. When it is full the relay can no
// longer commit, and every change fails: an operator should hear of it before then.

import Glibc

/// Space on a file system, in bytes.
public struct DiskSpace: Sendable, Equatable {
    public var available: UInt64
    public var total: UInt64

    public init(available: UInt64, total: UInt64) {
        self.available = available
        self.total = total
    }

    /// The file system that holds `path`, as statvfs(3) reports it (the space an
    /// unprivileged process may use); nil when it cannot be read.
    public static func of(_ path: String) -> DiskSpace? {
        var st = statvfs()
        guard statvfs(path, &st) == 0 else { return nil }
        let unit = UInt64(st.f_frsize)
        return DiskSpace(available: UInt64(st.f_bavail) * unit, total: UInt64(st.f_blocks) * unit)
    }

    /// Under a tenth of the file system free, or under a gibibyte of a large one.
    var isLow: Bool { available < min(total / 10, 1 << 30) }

    /// `bytes` in MiB, or in KiB under one MiB (where "0 MiB" would hide what is left).
    static func shown(_ bytes: UInt64) -> String { bytes < 1 << 20 ? "\(bytes >> 10) KiB" : "\(bytes >> 20) MiB" }
}
