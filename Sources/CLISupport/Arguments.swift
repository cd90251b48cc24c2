// Command-line plumbing shared by the programs: flags with values, positional
// arguments, usage errors (exit 64) and failures (exit 1).

import Foundation

/// Why a command stopped.
public enum CLIError: Error {
    /// Wrong arguments: print the message and where help is, exit 64.
    case usage(String)
    /// Wrong arguments to a command with a help of its own (`serve`, `member add`): as
    /// `usage`, pointing to that help.
    case commandUsage(String, command: String)
    /// The command could not do its work: exit 1.
    case failure(String)
}

/// Arguments after the subcommand words: `--flag value`, `--switch`, and positionals;
/// after `--`, every argument is a positional (a member id may begin with dashes). A flag of `repeatable` may repeat (`values` gives them all); any other given twice is a
/// usage error, rather than one of the two ignored.
public struct Arguments {
    public private(set) var positionals: [String] = []
    private var all: [String: [String]] = [:]
    private var switches: Set<String> = []

    /// `emptyAllowed`: the value flags for which an empty value means something (an
    /// unnamed place in a list, say); any other's empty value is a usage error.
    public init(
        _ args: [String], valueFlags: Set<String>, switchFlags: Set<String>, repeatable: Set<String> = [],
        emptyAllowed: Set<String> = []
    ) throws {
        var i = 0
        while i < args.count {
            let a = args[i]
            if a == "--" {
                positionals += args[(i + 1)...]
                break
            } else if a.hasPrefix("--") {
                let parts = a.split(separator: "=", maxSplits: 1).map(String.init)
                let name = parts[0]
                if switchFlags.contains(name) {
                    switches.insert(name)
                } else if valueFlags.contains(name) {
                    if parts.count == 2 {
                        all[name, default: []].append(parts[1])
                    } else {
                        guard i + 1 < args.count else { throw CLIError.usage("\(name) needs a value") }
                        i += 1
                        all[name, default: []].append(args[i])
                    }
                    // An empty value is a variable that was not set, never a name or a number (and
                    // an empty socket name is, to Linux, one outside the file system, open to all).
                    guard all[name]?.last?.isEmpty == false || emptyAllowed.contains(name) else {
                        throw CLIError.usage("\(name) needs a value, not an empty one")
                    }
                    guard all[name]!.count == 1 || repeatable.contains(name) else {
                        throw CLIError.usage("\(name) is given twice: give it once")
                    }
                } else {
                    throw CLIError.usage("unknown option \(name)\(didYouMean(name, among: valueFlags.union(switchFlags).sorted()))")
                }
            } else {
                positionals.append(a)
            }
            i += 1
        }
    }

    /// Where in `args` the first positional stands: the first argument that is neither an
    /// option nor the value of one of `valueFlags`, or the one after `--`.
    public static func firstPositional(in args: [String], valueFlags: Set<String>) -> Int? {
        var i = 0
        while i < args.count {
            let a = args[i]
            if a == "--" { return i + 1 < args.count ? i + 1 : nil }
            guard a.hasPrefix("-") else { return i }
            if valueFlags.contains(a) { i += 1 }  // `--flag value`; `--flag=value` is one argument
            i += 1
        }
        return nil
    }

    public func has(_ flag: String) -> Bool { switches.contains(flag) }
    public func value(_ flag: String) -> String? { all[flag]?.last }
    public func values(_ flag: String) -> [String] { all[flag] ?? [] }

    /// The flag's whole number, at least `lo` and at most `hi`, or `d` when it is not given.
    public func int(_ flag: String, default d: Int, min lo: Int = 0, max hi: Int = .max) throws -> Int {
        try number(flag, d, lo, hi, unbounded: .max, "whole number")
    }

    /// The flag's number, at least `lo` and at most `hi`, or `d` when it is not given.
    public func double(_ flag: String, default d: Double, min lo: Double = 0, max hi: Double = .greatestFiniteMagnitude) throws
        -> Double
    {
        try number(flag, d, lo, hi, unbounded: .greatestFiniteMagnitude, "number")
    }

    /// The flag's number of seconds (fractions allowed), at least `lo` and at most a century
    /// (`longestSeconds`), or `d` when it is not given.
    public func seconds(_ flag: String, default d: Double, min lo: Double = 0) throws -> Double {
        try number(flag, d, lo, longestSeconds, unbounded: .greatestFiniteMagnitude, "number of seconds")
    }

    private func number<N: LosslessStringConvertible & Comparable>(
        _ flag: String, _ d: N, _ lo: N, _ hi: N, unbounded: N, _ what: String
    ) throws -> N {
        guard let v = value(flag) else { return d }
        guard let n = N(v), n >= lo, n <= hi else {  // a NaN is neither
            func shown(_ n: N) -> String {
                guard let d = n as? Double else { return "\(n)" }
                return d == d.rounded() && abs(d) < 1e15 ? String(Int64(d)) : "\(d)"
            }
            let range = hi == unbounded ? "of at least \(shown(lo))" : "from \(shown(lo)) to \(shown(hi))"
            throw CLIError.usage("\(flag) must be a \(what) \(range), not \"\(v)\"")
        }
        return n
    }

    public func expectPositionals(_ names: [String]) throws -> [String] {
        guard positionals.count == names.count else {
            let what = names.isEmpty ? "no arguments" : names.joined(separator: " ")
            throw CLIError.usage("expected \(what), got \(positionals.isEmpty ? "nothing" : positionals.joined(separator: " "))")
        }
        return positionals
    }
}

/// The longest time a program takes as a number of seconds: a century. A `Duration` or a
/// `Date` holds more, but a longer one is a typo, and adding it to a clock could overflow.
public let longestSeconds: Double = 100 * 365 * 86_400

/// `2s`, `1.5s` or `2`: a number of seconds from 0 to `longestSeconds`; nil for anything else.
public func parseSeconds(_ text: String) -> Double? {
    guard let n = Double(text.hasSuffix("s") ? String(text.dropLast()) : text), n >= 0, n <= longestSeconds else { return nil }
    return n
}

/// This program's executable: `/proc/self/exe` resolved (argv[0] is a bare name when the
/// program is run from PATH), else argv[0] as given. Programs it starts lie beside it.
public let ownExecutable: URL = {
    if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"), path.hasPrefix("/"),
        !path.hasSuffix(" (deleted)")
    {
        return URL(fileURLWithPath: path)
    }
    return URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
}()

/// The version of the programs, and of the wire protocol they speak.
public let programVersion = "0.1.0"
public let wireProtocolVersion = 1

/// Runs a program's `main`: `--version` alone prints the version; usage errors print the
/// problem and where help is, and exit 64; failures print one line on stderr and exit 1.
public func runMain(program: String, _ body: () async throws -> Int32) async -> Int32 {
    if printsVersion(program) { return 0 }
    do {
        return try await body()
    } catch {
        return report(error, program: program)
    }
}

/// `runMain` for a program whose work is synchronous: it runs on the process's main thread,
/// where an async `main` would park that thread in `sigsuspend` and run the work on a
/// Dispatch thread (which valgrind 3.19 cannot follow on newer kernels).
public func runMain(program: String, _ body: () throws -> Int32) -> Int32 {
    if printsVersion(program) { return 0 }
    do {
        return try body()
    } catch {
        return report(error, program: program)
    }
}

private func printsVersion(_ program: String) -> Bool {
    guard Array(CommandLine.arguments.dropFirst()) == ["--version"] else { return false }
    printOut("\(program) \(programVersion) (wire protocol \(wireProtocolVersion))")
    return true
}

/// Prints `error` as `runMain` says and returns the exit code.
private func report(_ error: any Error, program: String) -> Int32 {
    switch error {
    case CLIError.usage(let message):
        printErr("\(program): \(message) (see `\(program) --help`)")
        return 64
    case CLIError.commandUsage(let message, let command):
        printErr("\(program): \(message) (see `\(program) \(command) --help`)")
        return 64
    case CLIError.failure(let message):
        printErr("\(program): \(message)")
        return 1
    default:
        printErr("\(program): \(error)")
        return 1
    }
}

/// Whether `typed` is `word` mistyped: one letter changed, added, left out, or two swapped.
func closeTo(_ word: String, _ typed: String) -> Bool {
    let a = Array(word), b = Array(typed)
    guard a != b, abs(a.count - b.count) <= 1 else { return false }
    if a.count == b.count {
        let differ = a.indices.filter { a[$0] != b[$0] }
        return differ.count == 1
            || (differ.count == 2 && differ[1] == differ[0] + 1 && a[differ[0]] == b[differ[1]] && a[differ[1]] == b[differ[0]])
    }
    let (long, short) = a.count > b.count ? (a, b) : (b, a)
    return long.indices.contains { i in Array(long[..<i] + long[(i + 1)...]) == short }
}

/// " (did you mean WORD?)" for the first of `words` that `typed` is a mistyping of, or "".
public func didYouMean(_ typed: String, among words: some Sequence<String>) -> String {
    words.first { closeTo($0, typed) }.map { " (did you mean \($0)?)" } ?? ""
}
