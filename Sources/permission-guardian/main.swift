// permission-guardian: the guardian's side — an interactive view of the family's
// pending questions on a terminal, and scriptable subcommands everywhere else.

import CLISupport
import ClientCommands
import CSystem
import Foundation
import PermissionKit
import RelayProtocol

let usage = """
    OVERVIEW: Answer children's permission questions, as a guardian's app does.

    USAGE: permission-guardian [<command>] [options]

    Without a command on a terminal: an interactive view of the family's pending questions,
    updating live. Keys: ↑/↓ or j/k select; a and d answer with the question's first
    approving and denying choice, which the keys line names; 1-9 pick a choice; q quit.

    COMMANDS:
      pending [--child C] [--json]      List pending questions, oldest first
      answer ID CHOICE                  Answer a question with a choice id (approve, decline, or a custom one)
      watch [--json]                    Print questions and closures as they come
      auto --approve|--decline [--choice ID] [--count N]
                                        A bot that answers every question, the oldest pending first, with
                                        its first approval (or denial) choice, or choice ID where it has one
                                        (N: stop after N answers; 0, the default: never)
      limits CHILD on|off               Turn a child's communication limits on or off
      known add|remove CHILD HANDLE...  Make handles known, or unknown, for a child
      history [--child C] [--limit N] [--json]   Questions, newest first, with their answers

    OPTIONS:
    \(ClientOptions.help)
      --json               Machine-readable output (one JSON object per line)

    EXIT STATUS:
      0 success (q in the view), 1 error (one line on stderr says what), 64 usage error,
      5 answer kept and not confirmed yet: the family's other devices are out of reach,
      130 stopped by Ctrl-C (SIGINT), 143 by SIGTERM

    EXAMPLES:
      export PERMISSION_CREDENTIALS=~/sam.json       # from `permission-relay member add … --credentials FILE`
      permission-guardian
      permission-guardian pending
      permission-guardian answer 6F9619FF-8B86-D011-B42D-00CF4FC964FF approve
      permission-guardian watch --json
      permission-guardian auto --approve
      permission-guardian limits alex on
      permission-guardian known add alex +15550100
      permission-guardian history --child alex --limit 20
    """

let flags: Set<String> = ClientOptions.valueFlags.union(["--child", "--choice", "--count", "--limit"])

func line(_ o: JSONObject) -> String { JSON.object(o).text }

/// Who answered a closed question, and with what: ` by sam (For an hour)`; empty for none.
func closedBy(_ c: ClosedQuestion) -> String {
    guard let by = c.by else { return "" }
    return terminalSafe(" by \(by)\(c.choice.map { " (\($0.title))" } ?? "")")
}

/// What a child asks to do, said of `people`.
private func phrase(_ action: CommunicationTopic.Action, _ people: String) -> String {
    switch action {
    case .message: "message \(people)"
    case .audioCall: "audio-call \(people)"
    case .videoCall: "video-call \(people)"
    case .call: "call \(people)"
    case .chat: "chat with \(people)"
    case .follow: "follow \(people)"
    case .beFollowed: "be followed by \(people)"
    case .friend: "become friends with \(people)"
    case .connect: "connect with \(people)"
    case .communicate: "communicate with \(people)"
    }
}

/// One line about the question, safe for a terminal (`terminalSafe`).
func summary(_ q: GuardianQuestion) -> String {
    switch q.topic {
    case .communication(let t):
        let people = describePeople(t)
        guard t.actions.count > 1 else {
            return terminalSafe("\(q.child) asks to \(phrase(t.actions.first ?? .communicate, people))")
        }
        let ways = t.actions.map(\.rawValue).sorted().joined(separator: ", ")
        return terminalSafe("\(q.child) asks to communicate with \(people): \(ways)")
    case .significantAppUpdate(let u):
        return terminalSafe("\(q.child) asks to keep using the app after an update: \(u.description)")
    }
}

/// The question's choice ids, as the commands list them.
func choiceIDs(_ q: GuardianQuestion) -> String { terminalSafe(q.choices.map(\.id).joined(separator: "|")) }

func questionLine(_ q: GuardianQuestion) -> JSONObject {
    var o: JSONObject = [
        "type": "question", "questionId": .string(q.id.uuidString), "child": .string(q.child), "status": .string(q.status),
        "summary": .string(summary(q)), "choices": .array(q.choices.map { .string($0.id) }), "attempt": .int(Int64(q.attempt)),
    ]
    if let e = q.expirationDate { o["expires"] = .string(ISO8601DateFormatter().string(from: e)) }
    if let a = q.answer { o["answer"] = .object(["choice": .string(a.choice.id), "guardian": .string(a.guardian)]) }
    return o
}

/// A desktop notification where the desktop offers one; silence elsewhere. Where
/// `notify-send` offers actions (libnotify 0.7.9 or later) it has a button for the
/// question's first approval and first denial, and a click on one answers the question
/// (`say` tells how that went).
func notify(_ q: GuardianQuestion, center: GuardianCenter, say: @escaping @Sendable (String) -> Void) {
    let env = ProcessInfo.processInfo.environment
    guard env["DISPLAY"] != nil || env["WAYLAND_DISPLAY"] != nil || env["DBUS_SESSION_BUS_ADDRESS"] != nil else { return }
    guard let tool = NotifySend.tool else { return }
    // The body may be read as markup (the notification specification's subset of HTML):
    // what the child wrote is escaped, so that it cannot add a link or hide text.
    let body = summary(q).replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
        .replacingOccurrences(of: ">", with: "&gt;")
    let buttons = [q.choices.first { $0.answer == .approval }, q.choices.first { $0.answer == .denial }].compactMap { $0 }
    let actions = NotifySend.offersActions ? ["--wait"] + buttons.map { "--action=\($0.id)=\(terminalSafe($0.title))" } : []
    // A thread of its own: notify-send with actions runs until the notification is clicked
    // or dismissed, which may be never, and must not hold one of the few threads Swift's
    // tasks share.
    let waiter = Thread {
        cs_unblock_stop_signals(nil)  // notify-send inherits this thread's mask: let it be stopped
        let p = Process()
        p.executableURL = URL(fileURLWithPath: tool)
        p.arguments = ["--app-name=permission-guardian", "Permission request", body] + actions
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        guard (try? p.run()) != nil else { return }
        // It prints the key of the action clicked, and nothing when the notification is dismissed.
        let clicked = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        p.waitUntilExit()
        guard let choice = buttons.first(where: { $0.id == clicked }) else { return }
        Task {
            do {
                try await center.answer(q, with: choice)
                say("answered \(q.child)'s question \(q.id) with \(terminalSafe(choice.title)) from the notification")
            } catch {
                say("could not answer \(q.id) from the notification: \(ClientOptions.describe(error))")
            }
        }
    }
    waiter.start()
}

/// The desktop's `notify-send`, found once.
enum NotifySend {
    static let tool: String? = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":")
        .map { "\($0)/notify-send" }.first { FileManager.default.isExecutableFile(atPath: $0) }

    /// Whether it takes `--action` (libnotify 0.7.9 or later).
    static let offersActions: Bool = {
        guard let tool else { return false }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: tool)
        p.arguments = ["--help"]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        guard (try? p.run()) != nil else { return false }
        let help = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        return help.contains("--action")
    }()
}

func run() async throws -> Int32 {
    let args = Array(CommandLine.arguments.dropFirst())
    if let help = CommandHelp.requested(by: args, usage: usage, program: "permission-guardian") {
        printOut(help)
        return 0
    }
    // The command is the first word that is no option's, with options before it too.
    var rest = args
    let command = Arguments.firstPositional(in: args, valueFlags: flags).map { rest.remove(at: $0) }
    let a = try Arguments(rest, valueFlags: flags, switchFlags: ["--json", "--approve", "--decline"])
    let commands = ["pending", "answer", "watch", "auto", "limits", "known", "history", "view"]
    if let command, !commands.contains(command) { throw CLIError.usage("unknown command \"\(command)\"") }
    // The view acts on keys: piped input must never answer questions.
    if command == nil || command == "view", isatty(0) == 0 || isatty(1) == 0 {
        throw CLIError.usage(command == nil ? "no command given (the interactive view needs a terminal)" : "the view needs a terminal")
    }
    // Each command that waits for events has a durable session of its own: the view and a
    // `watch` or `auto` beside it never take one from the other.
    let name = command ?? "view"
    if name == "answer" { _ = try a.expectPositionals(["ID", "CHOICE"]) }  // what is missing here first, then who
    if ["pending", "watch", "auto", "history", "view"].contains(name) { _ = try a.expectPositionals([]) }
    let waits = ["watch", "auto", "view"].contains(name)
    let config = try ClientOptions.configuration(a, app: name == "view" ? "permission-guardian" : "permission-guardian-\(name)")
    let center = GuardianCenter(configuration: waits ? try ClientOptions.durable(config) : config.ephemeral)
    let terminal = name == "view" ? RawTerminal() : nil
    let stop = stopOnSignals { _ in
        await center.close()
        terminal?.restore()
    }
    let status: Int32
    do {
        status = try await perform(name, a, center, terminal)
    } catch let e as CLIError {
        await stop.claimEnd()
        throw e
    } catch {
        await stop.claimEnd()
        throw CLIError.failure(
            ClientOptions.describe(error, unreachableBecause: center.connectionError ?? center.lastError))
    }
    await stop.claimEnd()
    await center.close()
    return status
}

func perform(_ command: String, _ a: Arguments, _ center: GuardianCenter, _ terminal: RawTerminal?) async throws -> Int32 {
    let json = a.has("--json")
    switch command {
    case "pending":
        let list = try await center.pending(child: a.value("--child"))
        for q in list {
            printOut(
                json
                    ? line(questionLine(q))
                    : "\(q.id)  \(timeLeft(until: q.expirationDate))  \(summary(q))  [\(choiceIDs(q))]")
        }
        if list.isEmpty && !json { printOut("no pending questions") }
    case "answer":
        let p = a.positionals  // ID and CHOICE, checked before connecting
        guard let id = UUID(uuidString: p[0]) else { throw CLIError.usage("ID must be a question id (a UUID)") }
        // An answer waits for the family hub when the family is on several devices: if it
        // takes a while, say whether that is why.
        let notice = Task {
            try? await Task.sleep(for: .seconds(1))
            guard !Task.isCancelled, let link = try? await center.familyLink(), !link.connected else { return }
            printErr("permission-guardian: \(waitingForDevices("the answer", link))")
        }
        defer { notice.cancel() }
        do {
            try await center.answer(id, with: p[1])
        } catch {
            guard let link = try? await center.familyLink(), !link.connected else { throw error }
            let why = link.trusted ? "the hub is out of reach from this device" : "the family hub no longer trusts this device"
            printErr(
                "permission-guardian: no word yet from the family's other devices (\(why)): the answer is kept here and counts"
                    + " once the hub has it, unless another guardian's, or the question's expiry, reached it first"
                    + " (`permission-guardian pending` shows whether the question is still open)"
            )
            return 5
        }
        printOut(
            json
                ? line(["questionId": .string(id.uuidString), "choice": .string(p[1]), "status": "answered"])
                : "answered \(id) with \(p[1])")
    case "watch":
        if !json { printErr("watching the family's questions (Ctrl-C to stop)") }
        let notices = reportConnectionTrouble(center.connectionStates(), program: "permission-guardian") { center.connectionError }
        defer { notices.cancel() }
        let questions = center.questions()
        let closed = center.closedQuestions()
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await q in questions {
                    notify(q, center: center) { printErr("permission-guardian: \($0)") }
                    printOut(
                        json
                            ? line(questionLine(q))
                            : "question \(q.id): \(summary(q)) [\(choiceIDs(q))], \(timeLeft(until: q.expirationDate))"
                    )
                }
            }
            group.addTask {
                for await c in closed {
                    var o: JSONObject = [
                        "type": "questionClosed", "questionId": .string(c.questionID.uuidString), "child": .string(c.child),
                        "reason": .string(c.reason),
                    ]
                    if let by = c.by { o["by"] = .string(by) }
                    if let choice = c.choice { o["choice"] = .string(choice.id) }
                    printOut(json ? line(o) : "closed \(c.questionID): \(c.reason)\(closedBy(c))")
                }
            }
        }
        // The streams end only when the relay refused the credentials.
        throw CLIError.failure(refusal(center.connectionError))
    case "auto":
        guard a.has("--approve") != a.has("--decline") else { throw CLIError.usage("auto needs --approve or --decline") }
        let approve = a.has("--approve")
        let limit = try a.int("--count", default: 0)
        var answered = 0
        if !json {
            printErr("answering every question with \(a.value("--choice") ?? (approve ? "an approval" : "a denial")) (Ctrl-C to stop)")
        }
        let notices = reportConnectionTrouble(center.connectionStates(), program: "permission-guardian") { center.connectionError }
        defer { notices.cancel() }
        for await q in center.questions() {
            let choice =
                a.value("--choice").flatMap { id in q.choices.first { $0.id == id } }
                ?? q.choices.first { $0.answer == (approve ? .approval : .denial) }!
            do {
                try await center.answer(q, with: choice)
                printOut(
                    json
                        ? line(["questionId": .string(q.id.uuidString), "choice": .string(choice.id)])
                        : "\(terminalSafe(choice.id)): \(summary(q))")
            } catch let e as RelayError where ["alreadyAnswered", "expired", "cancelled"].contains(e.code) {
                printErr("skipped \(q.id): \(e.code)")
            }
            answered += 1
            if limit > 0 && answered >= limit { return 0 }
        }
        throw CLIError.failure(refusal(center.connectionError))  // the stream ends only then
    case "limits":
        let p = try a.expectPositionals(["CHILD", "on|off"])
        guard p[1] == "on" || p[1] == "off" else { throw CLIError.usage("the last argument must be on or off") }
        try await center.setCommunicationLimits(for: p[0], enabled: p[1] == "on")
        printOut(json ? line(["child": .string(p[0]), "enabled": .bool(p[1] == "on")]) : "communication limits of \(p[0]): \(p[1])")
    case "known":
        guard a.positionals.count >= 3, ["add", "remove"].contains(a.positionals[0]) else {
            throw CLIError.usage("use: known add|remove CHILD HANDLE...")
        }
        let child = a.positionals[1]
        let handles = try a.positionals.dropFirst(2).map(parseHandle)
        let count =
            a.positionals[0] == "add"
            ? try await center.addKnownHandles(Array(handles), for: child) : try await center.removeKnownHandles(Array(handles), for: child)
        printOut(
            json
                ? line(["child": .string(child), "known": .int(Int64(count))])
                : "\(child) now has \(count) known handle\(count == 1 ? "" : "s")")
    case "history":
        let list = try await center.history(child: a.value("--child"), limit: try a.int("--limit", default: 100, min: 1))
        for q in list {
            let answer = q.answer.map { " → \(terminalSafe($0.choice.title)) by \($0.guardian)" } ?? ""
            printOut(
                json
                    ? line(questionLine(q))
                    : "\(q.id)  \(q.status.padding(toLength: 9, withPad: " ", startingAt: 0))  \(summary(q))\(answer)")
        }
        if list.isEmpty && !json { printOut("no questions yet") }
    default:
        return try await InteractiveView(center: center, terminal: terminal ?? RawTerminal()).run()
    }
    return 0
}

exit(await runMain(program: "permission-guardian", run))
