// permission-child: the child's side on the command line — ask, watch, cancel, and
// look up known handles, limits and questions — over the PermissionKit library.

import CLISupport
import ClientCommands
import Foundation
import PermissionKit
import RelayProtocol
import Synchronization

/// Exit codes of `ask` (and of every command on failure).
enum Exit {
    static let approved: Int32 = 0
    static let failure: Int32 = 1
    static let denied: Int32 = 2
    static let closed: Int32 = 3
    static let limitsOff: Int32 = 4
    static let stillPending: Int32 = 5
}

let usage = """
    OVERVIEW: Ask a guardian for permission, as a child's app does.

    USAGE: permission-child <command> [options]

    COMMANDS:
      ask HANDLE...              Ask to communicate with people (HANDLE: phone:…, email:…, custom:…, or a bare value)
          --name "GIVEN FAMILY"    A name for each handle, in order (repeat; "" for a handle without one)
          --action ACTION          message, audioCall, videoCall, call, chat, follow, beFollowed, friend, connect,
                                   communicate (repeat; default communicate)
          --choice ID:TITLE:approval|denial[:SECONDS]   A custom choice (repeat); SECONDS makes a timed approval
          --default ID             The choice assumed when nobody answers (default: the first denial)
          --expires 10m|2h|1d|RFC3339   When the question expires
          --id UUID                The question's id (default: a new one; reuse it to resend or re-ask)
          --new                    Ask even if the same question (people, actions, choices) is pending
                                   (without it, ask reports that question, and --wait waits for it)
          --wait                   Wait for the outcome; the exit status tells it
          --timeout SECONDS        With --wait: stop waiting after this long (exit 5; the question stays
                                   pending); 0, as without it: no limit
      ask-update --description TEXT   Ask to keep using the app after a significant update
          --choice, --default, --expires, --id, --new, --wait, --timeout   As for ask (--new: even if a
                                   question about the same update is pending)
      cancel ID                  Withdraw a pending question
      watch [--json]             Print responses and outcomes as they come (from its first run on: it
                                 keeps its place between runs)
      known HANDLE...            Print which handles are known (approved), and until when for a timed approval
      limits                     Print whether communication limits are on
      questions [--status S] [--json]   List this child's questions, newest first (S: pending, answered,
                                 cancelled or expired)

    OPTIONS:
    \(ClientOptions.help)
      --json               Machine-readable output (one JSON object per line)

    EXIT STATUS:
      0    approved (or success)
      2    denied
      3    expired or cancelled
      4    communication limits are off: the app may allow the contact without asking
      5    --timeout passed; the question stays pending
      1    error (one line on stderr says what)
      64   usage error
      130  stopped by Ctrl-C (SIGINT), 143 by SIGTERM; a question waited for stays pending

    EXAMPLES:
      export PERMISSION_CREDENTIALS=~/alex.json      # from `permission-relay member add … --credentials FILE`
      permission-child ask phone:+15550100 --name "Kim Lee" --action message --wait
      permission-child ask kim@example.org --choice hour:"For an hour":approval:3600 --choice no:No:denial
      permission-child ask-update --description "Version 2 adds group chat" --wait
      permission-child watch --json
      permission-child cancel 6F9619FF-8B86-D011-B42D-00CF4FC964FF
      permission-child known +15550100 kim@example.org
      permission-child limits
      permission-child questions --status pending
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
        guard let d = parseExpiry(e) else {
            throw CLIError.usage("--expires takes a time to come, such as 30s, 10m, 2h, 1d, or an RFC 3339 time, not \"\(e)\"")
        }
        expiry = d
    }
    return PermissionQuestion(id: id, topic: topic, choices: all, defaultChoice: def, expirationDate: expiry)
}

/// The question a waiting `ask` waits for: what an interruption reports as still pending.
final class Waiting: Sendable {
    private let id = Mutex<UUID?>(nil)
    private let loops = Mutex<Task<Void, Never>?>(nil)
    func set(_ q: UUID) { id.withLock { $0 = q } }
    var question: UUID? { id.withLock { $0 } }

    /// Runs `watch`'s loops over the center's streams until they end or `stopLoops` is called.
    func watch(_ body: @escaping @Sendable () async -> Void) async {
        let task = Task { await body() }
        loops.withLock { $0 = task }
        await task.value
    }

    /// Ends the loops and waits for them: each comes back for its next event first, which
    /// records the one it was handed as processed (a stop never shows a response twice).
    /// Not for more than two seconds: a loop stuck writing to a full pipe must not keep
    /// the program from stopping.
    func stopLoops() async {
        guard let task = loops.withLock({ $0 }) else { return }
        task.cancel()
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await task.value }
            group.addTask { try? await Task.sleep(for: .seconds(2)) }
            await group.next()
            group.cancelAll()
        }
    }
}

/// How a wait ended: the exit status, and the line that says it.
struct Ending: Sendable {
    let status: Int32
    let text: String
    let json: JSONObject
}

/// Sends the question (unless `existing`, a pending question it stands for, is given);
/// with --wait, waits for its response or outcome.
func send<T: QuestionTopic>(
    _ q: PermissionQuestion<T>, existing: QuestionSummary?, center: AskCenter, waiting: Waiting, stop: SignalStop, _ a: Arguments
) async throws -> Int32 {
    let json = a.has("--json")
    let timeout = try a.seconds("--timeout", default: 0)  // checked with the command line
    // An --id already pending or answered is a resend: the relay keeps the first version,
    // whatever this one asks, which a reused id may not mean.
    if a.value("--id") != nil, let earlier = try? await center.question(id: q.id), ["pending", "answered"].contains(earlier.status) {
        let about = earlier.handles.isEmpty ? "" : " about \(terminalSafe(earlier.handles.map(\.value).joined(separator: ", ")))"
        printErr("permission-child: question \(q.id) was asked before\(about) and is \(earlier.status): its first version stands")
    }
    guard a.has("--wait") else {
        if let existing {
            printOut(
                json
                    ? line([
                        "questionId": .string(existing.id.uuidString), "status": "pending", "attempt": .int(Int64(existing.attempt)),
                        "existing": true,
                    ])
                    : "already pending: \(existing.id), asked \(ago(existing.createdAt)) \(sameSubject(T.self)) (--new asks again)")
            return Exit.approved
        }
        let r = try await submitting(q, center: center, json: json)
        guard let r else { return Exit.limitsOff }
        let link = r.status == "pending" ? try? await center.familyLink() : nil
        let held = link?.connected == false
        var o: JSONObject = [
            "questionId": .string(r.questionID.uuidString), "status": .string(r.status), "attempt": .int(Int64(r.attempt)),
            "allKnown": .bool(r.allKnown),
        ]
        if held { o["waitingForDevices"] = true }
        printOut(
            json ? line(o) : "asked \(r.questionID) (\(r.status), attempt \(r.attempt)\(r.allKnown ? ", every handle already known" : ""))")
        if let link, held && !json { printErr("permission-child: \(waitingForDevices("the question", link))") }
        return 0
    }
    // The wait is on an ephemeral session (a `watch` keeps the durable one): what a
    // reconnection could have missed, the question's status after it tells.
    let id = existing?.id ?? q.id
    let responses = center.responses(for: T.self)
    let outcomes = center.outcomes()
    let states = center.connectionStates()
    let notices = reportConnectionTrouble(center.connectionStates(), program: "permission-child") { center.connectionError }
    defer { notices.cancel() }
    let link = reportFamilyLink(program: "permission-child", "the question") { try await center.familyLink() }
    defer { link.cancel() }
    if let existing {
        waiting.set(id)
        printErr(
            "question \(id), asked \(ago(existing.createdAt)) \(sameSubject(T.self)), is still pending; waiting for it (--new asks again)")
    } else {
        guard let r = try await submitting(q, center: center, json: json) else { return Exit.limitsOff }
        waiting.set(id)
        if !json {
            let known = r.allKnown ? ", though every handle is already known" : ""
            printErr("asked \(r.questionID) (\(r.status)\(known)); waiting for a guardian…")
        }
    }
    let ending = try await withThrowingTaskGroup(of: Ending?.self) { group in
        group.addTask {
            for await resp in responses where resp.question.id == id {
                return answered(id, resp.choice, by: resp.guardian)
            }
            return nil
        }
        group.addTask {
            for await o in outcomes where o.questionID == id {
                return closed(id, o.reason.rawValue, defaultChoice: o.defaultChoice)
            }
            return nil
        }
        group.addTask {
            for await state in states where state == .ready {
                guard let summary = try? await center.question(id: id) else { continue }
                if summary.status == "answered", let choice = summary.choice {
                    return answered(id, choice, by: summary.guardian ?? "")
                }
                if summary.status != "pending" {
                    // Expired while the relay was out of reach: with its default choice, as when seen.
                    return closed(id, summary.status, defaultChoice: summary.status == "expired" ? summary.defaultChoice : nil)
                }
            }
            // The streams end only when the center can receive nothing more.
            throw CLIError.failure(center.connectionState == .refused ? refusal(center.connectionError) : "the connection was closed")
        }
        if timeout > 0 {
            group.addTask {
                try await Task.sleep(for: .seconds(timeout))
                return Ending(
                    status: Exit.stillPending,
                    text:
                        "no answer within \(timeout.formatted()) s; question \(id) stays pending (run the same command again to wait for it)",
                    json: ["questionId": .string(id.uuidString), "outcome": "pending"])
            }
        }
        for try await ending in group {
            if let ending {
                group.cancelAll()
                return ending
            }
        }
        throw CLIError.failure("the connection was closed")
    }
    await stop.claimEnd()  // the outcome is what the user sees, not an interruption now
    if json {
        printOut(line(ending.json))
    } else if ending.status == Exit.stillPending {
        printErr("permission-child: \(ending.text)")
    } else {
        printOut(terminalSafe(ending.text))
    }
    return ending.status
}

/// Submits `q`; nil when the child's communication limits are off (which it says).
func submitting<T: QuestionTopic>(_ q: PermissionQuestion<T>, center: AskCenter, json: Bool) async throws -> AskReceipt? {
    do {
        return try await center.submit(q)
    } catch let e as RelayError where e.code == "communicationLimitsNotEnabled" {
        printOut(
            json
                ? line(["questionId": .string(q.id.uuidString), "outcome": "limitsOff"])
                : "communication limits are off for this child: the app may allow the contact without asking")
        return nil
    }
}

func answered(_ id: UUID, _ choice: PermissionChoice, by guardian: String) -> Ending {
    let approved = choice.answer == .approval
    return Ending(
        status: approved ? Exit.approved : Exit.denied, text: "\(approved ? "approved" : "denied"): \(choice.title) (by \(guardian))",
        json: [
            "questionId": .string(id.uuidString), "outcome": .string(approved ? "approved" : "denied"), "choice": .string(choice.id),
            "guardian": .string(guardian),
        ])
}

func closed(_ id: UUID, _ reason: String, defaultChoice: PermissionChoice?) -> Ending {
    Ending(
        status: Exit.closed, text: "\(reason)\(defaultChoice.map { "; default choice: \($0.title)" } ?? "")",
        json: ["questionId": .string(id.uuidString), "outcome": .string(reason)])
}

/// `40 s ago`, `3 min ago` or `2 h 5 min ago`: a question's age.
func ago(_ date: Date) -> String {
    let s = max(0, Int(Date().timeIntervalSince(date)))
    if s < 60 { return "\(s) s ago" }
    if s < 3600 { return "\(s / 60) min ago" }
    return "\(s / 3600) h \(s % 3600 / 60) min ago"
}

/// The child's pending question that this ask would repeat, if any (the one an
/// interrupted `ask` left): the same people, ways to communicate and choices, and an
/// expiry if this one has one.
func pendingQuestion(like new: PermissionQuestion<CommunicationTopic>, center: AskCenter) async throws -> QuestionSummary? {
    func ways(_ actions: Set<CommunicationTopic.Action>) -> Set<CommunicationTopic.Action> { actions.isEmpty ? [.communicate] : actions }
    let people = Set(new.topic.personInformation.compactMap(\.handle.normalized))
    return try await center.questions(status: "pending").first { q in
        q.topicKind == CommunicationTopic.id && Set(q.handles.compactMap(\.normalized)) == people
            && ways(q.actions) == ways(new.topic.actions) && q.choices == new.choices
            && (q.expirationDate != nil) == (new.expirationDate != nil)
    }
}

/// What a pending question found in place of a new one shares with it.
func sameSubject<T: QuestionTopic>(_: T.Type) -> String {
    T.self == SignificantAppUpdateTopic.self ? "about the same update" : "for the same people"
}

/// A pending question about the same app update, asked the same way.
func pendingQuestion(like new: PermissionQuestion<SignificantAppUpdateTopic>, center: AskCenter) async throws -> QuestionSummary? {
    try await center.questions(status: "pending").first { q in
        q.topicKind == SignificantAppUpdateTopic.id && q.updateDescription == new.topic.description && q.choices == new.choices
            && (q.expirationDate != nil) == (new.expirationDate != nil)
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
    _ responses: some AsyncSequence<PermissionResponse<T>, Never>, json: Bool, describe: (PermissionQuestion<T>) -> String
) async {
    for await r in responses {
        let verdict = r.choice.answer == .approval ? "approved" : "denied"
        printOut(
            json
                ? responseLine(r.question.id, r.choice, r.guardian)
                : terminalSafe("\(r.question.id): \(verdict) (\(r.choice.title), by \(r.guardian)) — \(describe(r.question))"))
    }
}

/// The actions `--action` names.
func actions(_ a: Arguments) throws -> Set<CommunicationTopic.Action> {
    try Set(
        a.values("--action").map { name in
            guard let action = CommunicationTopic.Action(rawValue: name) else {
                let all = CommunicationTopic.Action.allCases.map(\.rawValue)
                throw CLIError.usage("unknown --action \(name)\(didYouMean(name, among: all)): use \(all.joined(separator: ", "))")
            }
            return action
        })
}

func run() async throws -> Int32 {
    var args = Array(CommandLine.arguments.dropFirst())
    if let help = CommandHelp.requested(by: args, usage: usage, program: "permission-child") {
        printOut(help)
        return 0
    }
    // The command is the first word that is no option's, with options before it too.
    guard let at = Arguments.firstPositional(in: args, valueFlags: flags) else { throw CLIError.usage("no command given") }
    let command = args.remove(at: at)
    let a = try Arguments(
        args, valueFlags: flags, switchFlags: ["--wait", "--json", "--new"], repeatable: ["--name", "--action", "--choice"],
        emptyAllowed: ["--name"])
    guard CommandHelp.text(for: command, in: usage, program: "permission-child") != nil else {
        throw CLIError.usage("unknown command \"\(command)\"")
    }
    // Options of one command, checked before anything is sent.
    if ["ask-update", "watch", "limits", "questions"].contains(command) { _ = try a.expectPositionals([]) }
    if ["ask", "known"].contains(command), a.positionals.isEmpty { throw CLIError.usage("\(command) needs at least one HANDLE") }
    _ = try actions(a)
    if a.value("--timeout") != nil {
        guard command == "ask" || command == "ask-update" else { throw CLIError.usage("--timeout is an option of ask and ask-update") }
        guard a.has("--wait") else { throw CLIError.usage("--timeout is how long --wait waits: give --wait too") }
        _ = try a.seconds("--timeout", default: 0)
    }
    if let status = a.value("--status") {
        guard command == "questions" else { throw CLIError.usage("--status is an option of questions") }
        let statuses = QuestionStatus.allCases.map(\.rawValue)
        guard statuses.contains(status) else {
            throw CLIError.usage("unknown status \"\(status)\": use \(statuses.joined(separator: ", "))")
        }
    }
    // `watch` keeps its place in the child's events in a durable session. An ask that does
    // not wait opens that session too, unless it already follows the topic: its place, kept
    // from the ask on, is where a later `watch` finds the response that came meanwhile. A
    // waiting ask takes no durable session from a watch beside it.
    let config = try ClientOptions.configuration(a, app: "permission-child")
    var durable = command == "watch"
    if !a.has("--wait"),
        let topic: any QuestionTopic.Type = ["ask": CommunicationTopic.self, "ask-update": SignificantAppUpdateTopic.self][command]
    {
        durable = !config.sessionFollows(topic)
    }
    let center = AskCenter(configuration: durable ? try ClientOptions.durable(config) : config.ephemeral)
    let waiting = Waiting()
    let stop = stopOnSignals { _ in
        if let id = waiting.question {
            printErr(
                "permission-child: interrupted; question \(id) stays pending: run the same command again to wait for it,"
                    + " or `permission-child cancel \(id)` to withdraw it")
        }
        await waiting.stopLoops()
        await center.close()
    }
    let status: Int32
    do {
        status = try await perform(command, a, center, waiting, stop)
    } catch {
        await stop.claimEnd()
        throw error
    }
    await stop.claimEnd()
    await center.close()  // records every processed event before the process ends
    return status
}

func perform(_ command: String, _ a: Arguments, _ center: AskCenter, _ waiting: Waiting, _ stop: SignalStop) async throws -> Int32 {
    let json = a.has("--json")
    do {
        switch command {
        case "ask":
            let names = a.values("--name")
            guard names.count <= a.positionals.count else {
                throw CLIError.usage(
                    "\(names.count) names (--name) for \(a.positionals.count) handle\(a.positionals.count == 1 ? "" : "s"): give at most one for each handle, in order"
                )
            }
            let people = try a.positionals.enumerated().map { i, text -> CommunicationTopic.PersonInformation in
                var components: PersonNameComponents?
                if i < names.count {
                    let parts = names[i].split(separator: " ", maxSplits: 1).map(String.init)
                    components = PersonNameComponents(givenName: parts.first, familyName: parts.count > 1 ? parts[1] : nil)
                }
                return .init(handle: try parseHandle(text), nameComponents: components)
            }
            let topic = CommunicationTopic(personInformation: people, actions: try actions(a))
            let q = try question(topic, a)
            let existing = a.has("--new") || a.value("--id") != nil ? nil : try await pendingQuestion(like: q, center: center)
            return try await send(q, existing: existing, center: center, waiting: waiting, stop: stop, a)
        case "ask-update":
            guard let d = a.value("--description") else { throw CLIError.usage("ask-update needs --description TEXT") }
            let q = try question(SignificantAppUpdateTopic(description: d), a)
            let existing = a.has("--new") || a.value("--id") != nil ? nil : try await pendingQuestion(like: q, center: center)
            return try await send(q, existing: existing, center: center, waiting: waiting, stop: stop, a)
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
            await waiting.watch {
                await withTaskGroup(of: Void.self) { group in
                    group.addTask { await printResponses(responses, json: json) { describePeople($0.topic) } }
                    group.addTask { await printResponses(updates, json: json) { "update: \($0.topic.description)" } }
                    group.addTask {
                        for await o in outcomes {
                            printOut(
                                json
                                    ? line([
                                        "type": "outcome", "questionId": .string(o.questionID.uuidString),
                                        "reason": .string(o.reason.rawValue),
                                    ]) : "\(o.questionID): \(o.reason.rawValue)")
                        }
                    }
                }
            }
            // The streams end only when the relay refused the credentials.
            throw CLIError.failure(refusal(center.connectionError))
        case "known":
            let handles = try a.positionals.map(parseHandle)
            let knownSet = try await center.knownHandles(in: Set(handles))
            for h in handles {
                let isKnown = knownSet.contains(h)
                // Until when, for a handle a timed approval made known (one more request each).
                var until: String?
                if isKnown, case .approved(let end?) = try await center.state(for: h) {
                    until = Timestamp(milliseconds: Int64((end.timeIntervalSince1970 * 1000).rounded())).rfc3339
                }
                var o: JSONObject = ["handle": .string(h.value), "kind": .string(h.kind.rawValue), "known": .bool(isKnown)]
                if let until { o["until"] = .string(until) }
                printOut(json ? line(o) : "\(h.value): \(isKnown ? "known" : "not known")\(until.map { " until \($0)" } ?? "")")
            }
        case "limits":
            let on = try await center.limitsEnabled()
            printOut(json ? line(["enabled": .bool(on)]) : "communication limits: \(on ? "on" : "off")")
        default:  // questions
            let list = try await center.questions(status: a.value("--status"))
            for q in list {
                if json {
                    var o: JSONObject = [
                        "questionId": .string(q.id.uuidString), "topic": .string(q.topicKind), "status": .string(q.status),
                        "attempt": .int(Int64(q.attempt)), "handles": .array(q.handles.map { .string($0.value) }),
                    ]
                    if let d = q.updateDescription { o["description"] = .string(d) }
                    if let c = q.choice { o["choice"] = .string(c.id) }
                    if let g = q.guardian { o["guardian"] = .string(g) }
                    printOut(line(o))
                } else {
                    let who = q.updateDescription.map { "update: \($0)" } ?? q.handles.map(\.value).joined(separator: ", ")
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
            ClientOptions.describe(error, unreachableBecause: center.connectionError ?? center.lastError))
    }
}

exit(await runMain(program: "permission-child", run))
