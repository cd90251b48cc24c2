// What the programs write on stdout and stderr.

import Foundation
import Glibc

/// Why a line could not be written to stdout: the error, or that its reader has gone.
public struct OutputFailure: Error, CustomStringConvertible {
    public let errno: Int32
    /// The reader closed its end (a pipe into `head`, say): nothing to tell anyone.
    public var readerGone: Bool { errno == EPIPE }
    public var description: String { String(cString: strerror(errno)) }
}

/// Writes a line to stdout; says why it could not.
public func writeOut(_ s: String) -> OutputFailure? {
    let bytes = Array((s + "\n").utf8)
    var at = 0
    while at < bytes.count {
        let n = bytes.withUnsafeBytes { Glibc.write(1, $0.baseAddress! + at, $0.count - at) }
        if n < 0 {
            if errno == EINTR { continue }
            return OutputFailure(errno: errno)
        }
        at += n
    }
    return nil
}

/// Writes a line to stdout, or ends the program (status 1, saying why on stderr unless the
/// reader has gone): a program that went on would act as if the line had been read — a
/// watch would take the next event, acknowledging this one, and a full disk would lose it.
public func printOut(_ s: String) {
    guard let failure = writeOut(s) else { return }
    exitForOutput(failure)
}

/// Ends the program because stdout failed.
public func exitForOutput(_ failure: OutputFailure) -> Never {
    if !failure.readerGone { printErr("\(programName): cannot write the output: \(failure)") }
    exit(1)
}

/// A line on stderr, as far as it can be written (there is nowhere else to say it failed).
public func printErr(_ s: String) {
    try? FileHandle.standardError.write(contentsOf: Data((s + "\n").utf8))
}

/// This program's name, as it was run.
public let programName = (CommandLine.arguments.first.map { ($0 as NSString).lastPathComponent }) ?? "permission"

/// Opens the file at `path` for writing, made (mode 0644, less the umask) or emptied:
/// through a link, and into a pipe or a device, as into a file, so that a report asked
/// for at /dev/stdout or a FIFO goes there rather than a new file taking their place.
public func openForWriting(_ path: String) throws -> FileHandle {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { throw CLIError.failure("cannot write \(path): \(String(cString: strerror(errno)))") }
    return FileHandle(fileDescriptor: fd, closeOnDealloc: true)
}

/// Writes `text` to the file at `path`, as `openForWriting` opens it.
public func writeFile(_ text: String, to path: String) throws {
    let file = try openForWriting(path)
    do {
        try file.write(contentsOf: Data(text.utf8))
    } catch {
        throw CLIError.failure("cannot write \(path): \((error as NSError).localizedFailureReason ?? "\(error)")")
    }
}
