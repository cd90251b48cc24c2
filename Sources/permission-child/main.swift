// permission-child: the child's side on the command line — ask, watch, cancel, and
// look up known handles, limits and questions — over the PermissionKit library.

import CLISupport
import ClientCommands
import Foundation
import PermissionKit
import RelayProtocol

/// Exit codes of `ask --wait` (and of every command on failure).
enum Exit {
    static let approved: Int32 = 0
    static let failure: Int32 = 1
    static let denied: Int32 = 2
    static let closed: Int32 = 3
    static let usage: Int32 = 64
}

let usage = """
    OVERVIEW: Ask a guardian for permission, as a child's app does.

    USAGE: permission-child <command> [options]

    COMMANDS:
      ask HANDLE...              Ask to communicate with people (HANDLE: phone:…, email:…, custom:…, or a bare value)
          --name "GIVEN FAMILY"    A name for each handle, in order (repeat)
          --action ACTION          message, audioCall, videoCall, call, chat, follow, beFollowed, friend, connect,
                                   communicate (repeat; default communicate)
          --choice ID:TITLE:approval|denial[:SECONDS]   A custom choice (repeat); SECONDS makes a timed approval
          --default ID             The choice assumed when nobody answers (default: the first denial)
          --expires 10m|2h|1d|RFC3339   When the question expires
          --id UUID                The question's id (default: a new one; reuse it to resend or re-ask)
          --wait                   Wait for the outcome; the exit code tells it
          --timeout SECONDS        With --wait: give up after this long (exit 1)
      ask-update --description TEXT [--wait] [--expires …]   Ask to keep using the app after a significant update
      cancel ID                  Withdraw a pending question
      watch [--json]             Print responses and outcomes as they come
      known HANDLE...            Print which handles are known (approved)
      limits                     Print whether communication limits are on
      questions [--status S] [--json]   List this child's questions, newest first

    OPTIONS:
    \(ClientOptions.help)
      --json               Machine-readable output (one JSON object per line)

    EXIT STATUS:
      0 approved (or success), 2 denied, 3 expired or cancelled, 1 error, 64 usage error

    EXAMPLES:
      export PERMISSION_CREDENTIALS=~/alex.json      # from `permission-relay member add … --json`
      permission-child ask phone:+15550100 --name "Kim Lee" --action message --wait
      permission-child ask kim@example.org --choice hour:"For an hour":approval:3600 --choice no:No:denial
      permission-child ask-update --description "Version 2 adds group chat" --wait
      permission-child watch --json
      permission-child known +15550100 kim@example.org
    """

let flags: Set<String> = ClientOptions.valueFlags.union([
    "--name", "--action", "--choice", "--default", "--expires", "--id", "--timeout", "--description", "--status",
])

func choices(_ a: Arguments) throws -> [PermissionChoice] {
    try a.values("--choice").map { spec in
        let parts = spec.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3 || parts.count == 4, let answer = PermissionChoice.Answer(rawValue: parts[2]) else {
            throw CLIError.usage("--choice must be ID:TITLE:approval|denial[:SECONDS], not \"\(spec)\"")
        }
        var seconds: Int?
        if parts.count == 4 {
            guard let s = Int(parts[3]), s > 0 else { throw CLIError.usage("the SECONDS of --choice must be a positive number") }
            seconds = s
        }
        return PermissionChoice(id: parts[0], title: parts[1], answer: answer, durationSeconds: seconds)
    }
}

func question<T: QuestionTopic>(_ topic: T, _ a: Arguments) throws -> PermissionQuestion<T> {
    let list = try choices(a)
    let all = list.isEmpty ? [PermissionChoice.approve, .decline] : list
    var def: PermissionChoice?
    if let d = a.value("--default") {
        guard let c = all.first(where: { $0.id == d }) else { throw CLIError.usage("--default \(d) is not one of the choices") }
        def = c
    }
    var id = UUID()
    if let s = a.value("--id") {
        guard let u = UUID(uuidString: s) else { throw CLIError.usage("--id must be a UUID") }
        id = u
    }
    var expiry: Date?
    if let e = a.value("--expires") {
        guard let d = parseExpiry(e) else { throw CLIError.usage("--expires takes 30s, 10m, 2h, 1d or an RFC 3339 time") }
        expiry = d
    }
    return PermissionQuestion(id: id, topic: topic, choices: all, defaultChoice: def, expirationDate: expiry)
}

/// Sends the question; with --wait, waits for its response or outcome.
func send<T: QuestionTopic>(_ q: PermissionQuestion<T>, center: AskCenter, _ a: Arguments) async throws -> Int32 {
    let json = a.has("--json")
    guard a.has("--wait") else {
        let r = try await center.submit(q)
        printOut(
            json
                ? line([
                    "questionId": .string(r.questionID.uuidString), "status": .string(r.status), "attempt": .int(Int64(r.attempt)),
                    "allKnown": .bool(r.allKnown),
                ]) : "asked \(r.questionID) (\(r.status), attempt \(r.attempt)\(r.allKnown ? ", every handle already known" : ""))")
        return 0
    }
    let responses = center.responses(for: T.self)
    let outcomes = center.outcomes()
    let notices = reportConnectionTrouble(center.connectionStates(), program: "permission-child") { center.connectionError }
    defer { notices.cancel() }
    let r = try await center.submit(q)
    if !json { printErr("asked \(r.questionID) (\(r.status)); waiting for a guardian…") }
    let timeout = try a.double("--timeout", default: 0)
    return try await withThrowingTaskGroup(of: Int32.self) { group in
        group.addTask {
            for await resp in responses where resp.question.id == q.id {
                let approved = resp.choice.answer == .approval
                printOut(
                    json
                        ? line([
                            "questionId": .string(q.id.uuidString), "outcome": .string(approved ? "approved" : "denied"),
                            "choice": .string(resp.choice.id), "guardian": .string(resp.guardian),
                        ]) : "\(approved ? "approved" : "denied"): \(resp.choice.title) (by \(resp.guardian))")
                return approved ? Exit.approved : Exit.denied
            }
            return Exit.failure
        }
        group.addTask {
            for await o in outcomes where o.questionID == q.id {
                printOut(
                    json
                        ? line(["questionId": .string(q.id.uuidString), "outcome": .string(o.reason.rawValue)])
                        : terminalSafe("\(o.reason.rawValue)\(o.defaultChoice.map { "; default choice: \($0.title)" } ?? "")"))
                return Exit.closed
            }
            return Exit.failure
        }
        if timeout > 0 {
            group.addTask {
                try await Task.sleep(for: .seconds(timeout))
                throw CLIError.failure("no answer within \(timeout) seconds; the question stays pending")
            }
        }
        let first = try await group.next() ?? Exit.failure
        group.cancelAll()
        return first
    }
}

func line(_ o: JSONObject) -> String { JSON.object(o).text }

func responseLine(_ id: UUID, _ c: PermissionChoice, _ guardian: String) -> String {
    line([
        "type": "response", "questionId": .string(id.uuidString), "choice": .string(c.id), "answer": .string(c.answer.rawValue),
        "guardian": .string(guardian),
    ])
}

/// Prints each response as it comes: a line of JSON, or a sentence ending in `describe`.
func printResponses<T: QuestionTopic>(
    _ responses: AsyncStream<PermissionResponse<T>>, json: Bool, describe: (PermissionQuestion<T>) -> String
) async {
    for await r in responses {
        let verdict = r.choice.answer == .approval ? "approved" : "denied"
        printOut(
            json
                ? responseLine(r.question.id, r.choice, r.guardian)
                : terminalSafe("\(r.question.id): \(verdict) (\(r.choice.title), by \(r.guardian)) — \(describe(r.question))"))
    }
}

func run() async throws -> Int32 {
    let args = Array(CommandLine.arguments.dropFirst())
    guard let command = args.first else { throw CLIError.usage("no command given") }
    if command == "-h" || command == "--help" || command == "help" || args.contains("--help") || args.contains("-h") {
        printOut(usage)
        return 0
    }
    let a = try Arguments(Array(args.dropFirst()), valueFlags: flags, switchFlags: ["--wait", "--json"])
    let known = ["ask", "ask-update", "cancel", "watch", "known", "limits", "questions"]
    guard known.contains(command) else { throw CLIError.usage("unknown command \"\(command)\"") }
    // Asking opens the durable session too, unless the session already follows the topic:
    // its place in the stream, kept from the ask on, is where a later `watch` finds the
    // response that came meanwhile.
    let config = try ClientOptions.configuration(a)
    var durable = command == "watch" || a.has("--wait")
    if !durable,
        let topic: any QuestionTopic.Type = ["ask": CommunicationTopic.self, "ask-update": SignificantAppUpdateTopic.self][command]
    {
        durable = !config.sessionFollows(topic)
    }
    let center = AskCenter(configuration: durable ? try ClientOptions.durable(config) : config.ephemeral)
    let signals = stopOnSignals { await center.close() }
    defer { withExtendedLifetime(signals) {} }  // `_ = signals` would not keep them in an optimized build
    let status = try await perform(command, a, center)
    await center.close()  // records every processed event before the process ends
    return status
}

func perform(_ command: String, _ a: Arguments, _ center: AskCenter) async throws -> Int32 {
    let json = a.has("--json")
    do {
        switch command {
        case "ask":
            guard !a.positionals.isEmpty else { throw CLIError.usage("ask needs at least one HANDLE") }
            let names = a.values("--name")
            let people = a.positionals.enumerated().map { i, text -> CommunicationTopic.PersonInformation in
                var components: PersonNameComponents?
                if i < names.count {
                    let parts = names[i].split(separator: " ", maxSplits: 1).map(String.init)
                    components = PersonNameComponents(givenName: parts.first, familyName: parts.count > 1 ? parts[1] : nil)
                }
                return .init(handle: parseHandle(text), nameComponents: components)
            }
            var actions: Set<CommunicationTopic.Action> = []
            for name in a.values("--action") {
                guard let act = CommunicationTopic.Action(rawValue: name) else { throw CLIError.usage("unknown --action \(name)") }
                actions.insert(act)
            }
            return try await send(try question(CommunicationTopic(personInformation: people, actions: actions), a), center: center, a)
        case "ask-update":
            guard let d = a.value("--description") else { throw CLIError.usage("ask-update needs --description TEXT") }
            return try await send(try question(SignificantAppUpdateTopic(description: d), a), center: center, a)
        case "cancel":
            guard let id = try a.expectPositionals(["ID"]).first.flatMap(UUID.init(uuidString:)) else {
                throw CLIError.usage("cancel needs a question id (a UUID)")
            }
            try await center.cancel(questionID: id)
            printOut(json ? line(["questionId": .string(id.uuidString), "status": "cancelled"]) : "cancelled \(id)")
        case "watch":
            let responses = center.responses(for: CommunicationTopic.self)
            let updates = center.responses(for: SignificantAppUpdateTopic.self)
            let outcomes = center.outcomes()
            if !json { printErr("watching responses and outcomes (Ctrl-C to stop)") }
            let notices = reportConnectionTrouble(center.connectionStates(), program: "permission-child") { center.connectionError }
            defer { notices.cancel() }
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await printResponses(responses, json: json) { describePeople($0.topic) } }
                group.addTask { await printResponses(updates, json: json) { "update: \($0.topic.description)" } }
                group.addTask {
                    for await o in outcomes {
                        printOut(
                            json
                                ? line([
                                    "type": "outcome", "questionId": .string(o.questionID.uuidString), "reason": .string(o.reason.rawValue),
                                ]) : "\(o.questionID): \(o.reason.rawValue)")
                    }
                }
            }
        case "known":
            guard !a.positionals.isEmpty else { throw CLIError.usage("known needs at least one HANDLE") }
            let handles = a.positionals.map(parseHandle)
            let knownSet = try await center.knownHandles(in: Set(handles))
            for h in handles {
                let isKnown = knownSet.contains(h)
                printOut(
                    json
                        ? line(["handle": .string(h.value), "kind": .string(h.kind.rawValue), "known": .bool(isKnown)])
                        : "\(h.value): \(isKnown ? "known" : "not known")")
            }
        case "limits":
            let on = try await center.limitsEnabled()
            printOut(json ? line(["enabled": .bool(on)]) : "communication limits: \(on ? "on" : "off")")
        default:  // questions
            let list = try await center.questions(status: a.value("--status"))
            for q in list {
                if json {
                    var o: JSONObject = [
                        "id": .string(q.id.uuidString), "topic": .string(q.topicKind), "status": .string(q.status),
                        "attempt": .int(Int64(q.attempt)),
                    ]
                    if let c = q.choice { o["choice"] = .string(c.id) }
                    printOut(line(o))
                } else {
                    let who = q.handles.map(\.value).joined(separator: ", ")
                    printOut(
                        terminalSafe(
                            "\(q.id)  \(q.status.padding(toLength: 9, withPad: " ", startingAt: 0))  \(q.topicKind)  \(who)\(q.choice.map { "  → \($0.title) by \(q.guardian ?? "")" } ?? "")"
                        ))
                }
            }
            if list.isEmpty && !json { printOut("no questions") }
        }
        return 0
    } catch let e as CLIError {
        throw e
    } catch {
        throw CLIError.failure(
            ClientOptions.describe(error, unreachableBecause: center.connectionState == .ready ? nil : center.connectionError))
    }
}

exit(await runMain(program: "permission-child", usage: { usage }, run))
