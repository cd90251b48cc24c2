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

    public init(level: LogLevel = .info, sink: @escaping (String) -> Void) {
        self.level = level
        self.sink = sink
    }

    /// Lines to standard error.
    public static func stderr(level: LogLevel) -> Log {
        Log(level: level) { line in FileHandle.standardError.write(Data((line + "\n").utf8)) }
    }

    public func callAsFunction(_ l: LogLevel, _ message: @autoclosure () -> String) {
        guard l >= level else { return }
        sink("\(Timestamp.nowText()) \(l.name): \(message())")
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
