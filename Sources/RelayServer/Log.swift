// The one logging type of the relay: leveled lines to a sink (stderr in the daemon,
// memory in tests). Libraries log through it; only executables print.

import Foundation
import RelayProtocol

public enum LogLevel: Int, Comparable, Sendable, CaseIterable {
    case debug, info, warning, error
    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
    public var name: String { String(describing: self) }
}

public final class Log: @unchecked Sendable {
    public let level: LogLevel
    private let sink: (String) -> Void

    public convenience init(level: LogLevel = .info, sink: @escaping (String) -> Void) {
        self.init(level: level, journal: false, sink: sink)
    }

    /// Lines to standard error: with a time and the level, or, when standard error is the
    /// journal (systemd's `JOURNAL_STREAM` names its device and inode), with the priority as
    /// a `<N>` prefix the journal reads and no time of its own (it keeps one).
    public static func stderr(level: LogLevel) -> Log {
        let journal = Self.standardErrorIsTheJournal()
        return Log(level: level, journal: journal) { line in try? FileHandle.standardError.write(contentsOf: Data((line + "\n").utf8)) }
    }

    private let journal: Bool

    /// `journal`: lines as the journal reads them (see `stderr`).
    public init(level: LogLevel = .info, journal: Bool, sink: @escaping (String) -> Void) {
        self.level = level
        self.journal = journal
        self.sink = sink
    }

    public func callAsFunction(_ l: LogLevel, _ message: @autoclosure () -> String) {
        guard l >= level else { return }
        if journal {
            // syslog priorities: debug 7, info 6, warning 4, error 3. One line per entry.
            let priority = [LogLevel.debug: 7, .info: 6, .warning: 4, .error: 3][l]!
            sink("<\(priority)>\(message().replacingOccurrences(of: "\n", with: " "))")
        } else {
            sink("\(Timestamp.nowText()) \(l.name): \(message())")
        }
    }

    static func standardErrorIsTheJournal() -> Bool {
        guard let stream = ProcessInfo.processInfo.environment["JOURNAL_STREAM"] else { return false }
        let parts = stream.split(separator: ":").compactMap { UInt64($0) }
        var st = stat()
        guard parts.count == 2, fstat(2, &st) == 0 else { return false }
        return UInt64(st.st_dev) == parts[0] && UInt64(st.st_ino) == parts[1]
    }
}

extension Timestamp {
    /// The current wall-clock time.
    public static func now() -> Timestamp {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Timestamp(milliseconds: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000)
    }

    static func nowText() -> String { now().rfc3339 }
}
