// The interactive terminal view: pending questions of every child of the family,
// live as they arrive and close, answered with single keys. One task owns the view
// state; keys, questions, closures and clock ticks reach it through one stream.

import CLISupport
import CSystem
import ClientCommands
import Foundation
import Glibc
import PermissionKit
import Synchronization

struct InteractiveView {
    let center: GuardianCenter
    let terminal: RawTerminal

    private enum Input: Sendable {
        case key([UInt8])
        case question(GuardianQuestion)
        case closed(ClosedQuestion)
        case answered(String)
        /// One of the view's own answers was sent, or could not be (what to say).
        case sent(String)
        case tick
        case connection(ConnectionState)
        /// The pending questions were read, or could not be (why).
        case loaded(Result<Void, ClientCommandError>)
    }

    /// Runs until `q` (status 0) or Ctrl-C (130, as for SIGINT: the raw terminal turns
    /// the key into a byte instead of a signal); throws when the relay refuses the credentials.
    func run() async throws -> Int32 {
        defer { terminal.restore() }
        let (inputs, feed) = AsyncStream<Input>.makeStream()
        let keys = Thread {
            var buf = [UInt8](repeating: 0, count: 256)
            var carried: [UInt8] = []
            while true {
                let n = Glibc.read(0, &buf, buf.count)
                if n <= 0 { break }
                let (keys, rest) = terminalKeys(buf[0..<n], carried: carried)
                carried = rest
                for key in keys { feed.yield(.key(key)) }
            }
            feed.yield(.key([UInt8(ascii: "q")]))
        }
        keys.start()
        let load = {
            Task {
                do {
                    _ = try await center.pending()
                    feed.yield(.loaded(.success(())))
                } catch {
                    let why = ClientOptions.describe(error, unreachableBecause: center.connectionError ?? center.lastError)
                    feed.yield(.loaded(.failure(ClientCommandError(why))))
                }
            }
        }
        var tasks = [
            Task { for await q in center.questions() { feed.yield(.question(q)) } },
            Task { for await c in center.closedQuestions() { feed.yield(.closed(c)) } },
            Task { for await s in center.connectionStates() { feed.yield(.connection(s)) } },
            load(),
            Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(1))
                    feed.yield(.tick)
                }
            },
        ]
        defer { for t in tasks { t.cancel() } }

        var pending: [GuardianQuestion] = []
        var selected = 0
        var message = ""
        var listed = false  // the pending questions were read once
        var connection = ConnectionState.connecting
        var loaded = false
        var sending = 0  // answers under way
        // Quit with answers under way: they go first (a key that answers, typed just
        // before `q`, still answers), unless the relay takes longer than a few seconds.
        var quitting: (status: Int32, deadline: ContinuousClock.Instant)?
        draw(pending, selected, message, connection, listed)
        for await input in inputs {
            switch input {
            case .key(let bytes):
                switch bytes {
                case [UInt8(ascii: "q")], [4], [3]:
                    let status = bytes == [3] ? 128 + SIGINT : 0
                    if quitting != nil { return status }  // asked twice: at once
                    quitting = (status, .now + .seconds(3))
                    message = "sending the answer before quitting… (again to quit now)"
                case [UInt8(ascii: "j")], [27, 91, 66], [27, 79, 66]: selected = min(selected + 1, max(pending.count - 1, 0))
                case [UInt8(ascii: "k")], [27, 91, 65], [27, 79, 65]: selected = max(selected - 1, 0)
                default:
                    guard quitting == nil, selected < pending.count, let key = bytes.first else { break }
                    let q = pending[selected]
                    var choice: PermissionChoice?
                    switch key {
                    case UInt8(ascii: "a"): choice = q.choices.first { $0.answer == .approval }
                    case UInt8(ascii: "d"): choice = q.choices.first { $0.answer == .denial }
                    case UInt8(ascii: "1")...UInt8(ascii: "9"):
                        let i = Int(key - UInt8(ascii: "1"))
                        choice = i < q.choices.count ? q.choices[i] : nil
                    default: break
                    }
                    guard let choice else { break }
                    message = "answering \(q.child)'s question with \(choice.title)…"
                    sending += 1
                    Task {
                        do {
                            try await center.answer(q, with: choice)
                            feed.yield(.sent("answered: \(choice.title) for \(q.child)"))
                        } catch {
                            feed.yield(.sent("could not answer: \(ClientOptions.describe(error))"))
                        }
                    }
                }
            case .question(let q):
                pending.removeAll { $0.id == q.id }
                pending.append(q)
                pending.sort { $0.createdAt < $1.createdAt }
                if loaded { notify(q, center: center) { feed.yield(.answered($0)) } }
                message = "new question from \(q.child)"
            case .closed(let c):
                pending.removeAll { $0.id == c.questionID }
                if !message.hasPrefix("answered") {
                    message = "a question of \(c.child) closed: \(c.reason)\(closedBy(c))"
                }
            case .answered(let text):
                message = text
            case .sent(let text):
                sending -= 1
                message = text
            case .tick:
                loaded = true
            case .loaded(let result):
                listed = true
                if case .failure(let e) = result { message = "\(Self.unreadable): \(e.message)" }
            case .connection(let s):
                connection = s
                if s == .replaced { message = replacedNotice }
                // Connected after all: why the questions could not be read holds no longer.
                if s == .ready && message.hasPrefix(Self.unreadable) {
                    (message, listed) = ("", false)
                    tasks.append(load())
                }
                // Ends the view as it ends `watch`: said in full once the terminal is back.
                if s == .refused { throw CLIError.failure(refusal(center.connectionError)) }
            }
            if let quitting, sending == 0 || ContinuousClock.now >= quitting.deadline { return quitting.status }
            selected = min(selected, max(pending.count - 1, 0))
            draw(pending, selected, message, connection, listed)
        }
        return 0  // not reached: the stream of inputs never ends
    }

    /// Draws the screen, fitted to the terminal: as many questions as its height allows,
    /// scrolled so that the selected one shows. The selected question and the message are
    /// wrapped to the terminal's width, so that what is being approved shows in full as far
    /// as the terminal's height allows (`pending` lists it all); the other questions' lines
    /// are cut to it.
    private func draw(_ pending: [GuardianQuestion], _ selected: Int, _ message: String, _ state: ConnectionState, _ listed: Bool) {
        var rows: Int32 = 24, cols: Int32 = 80
        _ = cs_terminal_size(1, &rows, &cols)
        let width = max(Int(cols), 20)
        func line(_ text: String) -> String {
            let text = terminalSafe(text)
            return (text.count <= width ? text : String(text.prefix(width - 1)) + "…") + "\r\n"
        }
        /// `text` in lines of the width (at spaces where it can), each after `indent`; at most `limit`.
        func wrapped(_ text: String, indent: String, limit: Int) -> [String] {
            var lines: [String] = []
            var rest = Substring(terminalSafe(text))
            let room = max(width - indent.count, 10)
            while !rest.isEmpty && lines.count < limit {
                var cut = rest.count <= room ? rest.endIndex : rest.index(rest.startIndex, offsetBy: room)
                if cut < rest.endIndex, let space = rest[..<cut].lastIndex(of: " "),
                    rest.distance(from: rest.startIndex, to: space) > room / 2
                {
                    cut = space
                }
                lines.append(indent + rest[..<cut])
                rest = rest[cut...].drop { $0 == " " }
            }
            if !rest.isEmpty, let last = lines.popLast() { lines.append(String(last.prefix(width - 1)) + "…") }
            return lines
        }
        func choicesLine(_ q: GuardianQuestion) -> String {
            let left = q.expirationDate == nil ? "no expiry" : timeLeft(until: q.expirationDate) + " left"
            let choices = q.choices.enumerated().map { "\($0.offset + 1) \($0.element.title)" }.joined(separator: ", ")
            return "\(left) · choices: \(choices)"
        }
        let chosen = pending.indices.contains(selected) ? pending[selected] : nil
        let said = message.isEmpty ? [""] : wrapped(message, indent: "", limit: 3)
        // The rows the other lines leave (see below), at least one for each part.
        let detailRoom = max(2, Int(rows) - 7 - said.count)
        let detail: [String] =
            chosen.map { q in
                var lines = wrapped(summary(q), indent: "  ", limit: max(1, detailRoom - 1))
                if !lines.isEmpty { lines[0] = "› " + lines[0].dropFirst(2) }
                return lines + wrapped(choicesLine(q), indent: "    ", limit: max(1, min(3, detailRoom - lines.count)))
            } ?? []
        // Header and a blank line, a line above and below the list for what is scrolled
        // away, and the message and keys under a blank line; one row spare, so that the last
        // line's newline does not scroll the header away. Questions other than the selected
        // one take two lines each.
        let free = Int(rows) - 7 - said.count - max(detail.count, 2)
        let room = 1 + max(0, free / 2)
        let first = min(max(0, selected - (room - 1) / 2), max(0, pending.count - room))
        let shown = pending.indices.clamped(to: first..<min(first + room, pending.count))
        var out = "\u{1B}[H\u{1B}[2J"
        out += line("Permission requests — \(pending.count) pending   [relay: \(state.rawValue)]") + "\r\n"
        let empty = listed ? (message.hasPrefix(Self.unreadable) ? "  (none shown: see below)" : "  No questions waiting.") : "  loading…"
        out += pending.isEmpty ? line(empty) : line(first > 0 ? "  ↑ \(first) more" : "")
        for i in shown {
            let q = pending[i]
            if i == selected {
                out += detail.map { $0 + "\r\n" }.joined()
            } else {
                out += line("  \(summary(q))") + line("    " + choicesLine(q))
            }
        }
        let below = pending.count - shown.upperBound
        out += line(below > 0 ? "  ↓ \(below) more" : "")
        out += "\r\n" + said.map { $0 + "\r\n" }.joined()
        // What a and d answer the selected question with: its first approval and denial.
        func key(_ k: String, _ answer: PermissionChoice.Answer, _ word: String) -> String {
            guard let chosen else { return "\(k) \(word) · " }
            return chosen.choices.first { $0.answer == answer }.map { "\(k) \($0.title) · " } ?? ""
        }
        let approve = key("a", .approval, "approve"), decline = key("d", .denial, "decline")
        out += line("↑/↓ select · \(approve)\(decline)1-9 choice · q quit")
        try? FileHandle.standardOutput.write(contentsOf: Data(out.utf8))
    }

    /// How the message begins when the pending questions could not be read.
    private static let unreadable = "could not read the pending questions"
}

/// The terminal in raw mode (no echo, no line buffering) until `restore`, which the view
/// and a signal's handler may both call: it restores once.
final class RawTerminal: Sendable {
    /// The settings to restore; nil once restored, or when stdin is no terminal.
    private let saved: Mutex<termios?>

    init() {
        var settings = termios()
        guard tcgetattr(0, &settings) == 0 else {
            saved = Mutex(nil)
            return
        }
        saved = Mutex(settings)
        var raw = settings
        raw.c_lflag &= ~tcflag_t(ICANON | ECHO | ISIG)
        tcsetattr(0, TCSANOW, &raw)
        // The terminal's alternate screen, cursor hidden: what was on the screen before is
        // there again after the view, as after `less`.
        try? FileHandle.standardOutput.write(contentsOf: Data("\u{1B}[?1049h\u{1B}[?25l".utf8))
    }

    func restore() {
        guard
            var settings = saved.withLock({ s in
                defer { s = nil }; return s
            })
        else { return }
        tcsetattr(0, TCSANOW, &settings)
        try? FileHandle.standardOutput.write(contentsOf: Data("\u{1B}[?25h\u{1B}[?1049l".utf8))
    }
}

/// An error's one-line description, carried where a `Result` needs an `Error`.
struct ClientCommandError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}
