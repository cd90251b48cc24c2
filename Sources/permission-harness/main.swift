// permission-harness: plays whole scenarios — children, guardians, crashes — against
// a real relay, each actor its own OS process running the PermissionKit library.

import CLISupport
import ClientCommands
import CSystem
import Foundation
import PermissionKit
import RelayProtocol
import RelayServer
import Synchronization

let usage = """
    OVERVIEW: Run ask-a-guardian scenarios end to end against a real relay.

    USAGE: permission-harness run SCENARIO.json... [--socket PATH | --relay PATH] [--junit FILE]
           permission-harness guardian --family FAMILY --policy POLICY [--socket PATH]

    run: each scenario gets its own relay on a temporary socket and data directory (or the
    running relay at --socket, with names made unique), its families, and one process per
    actor. A timeline shows who sent what and what came back; the last line is
    "N passed, M failed"; the exit status is 0 only when all pass.

    guardian: a scripted guardian for testing your own child app. It joins FAMILY as a new
    guardian (an admin session: run it as the relay's user), answers every question, and
    leaves the family when stopped (Ctrl-C or SIGTERM):
      POLICY  approve | decline | approve-after:2s | decline-after:2s | never

    The scenario format is described in docs/harness.md.

    OPTIONS:
      --socket PATH   A running relay (default for guardian: \(RelayConfiguration.defaultSocketPath))
      --relay PATH    The permission-relay program that run starts (default: the one beside
                      this program, else the first on PATH)
      --junit FILE    Also write a JUnit XML report
      -h, --help      Show this help.
      --version       Print the version.

    EXAMPLES:
      permission-harness run Tests/Scenarios/*.json
      permission-harness run Tests/Scenarios/cancel-then-reask.json --junit report.xml
      permission-harness guardian --family smiths --policy approve-after:2s
    """

func runScenarios(_ a: Arguments) throws -> Int32 {
    let socket = a.value("--socket")
    if socket != nil && a.value("--relay") != nil {
        throw CLIError.usage("--relay is the relay run starts; with --socket it uses that running relay instead")
    }
    // Found once, before any scenario: without it none could run.
    let relay = socket == nil ? try findRelay(explicit: a.value("--relay")) : nil
    if let junit = a.value("--junit") {  // checked before a run that could not report
        let parent = (junit as NSString).deletingLastPathComponent
        var isDirectory: ObjCBool = false
        let exists = FileManager.default.fileExists(atPath: junit, isDirectory: &isDirectory)
        // One there (a file, a pipe, /dev/stdout) is written as it is; a new one is made.
        let why =
            exists
            ? isDirectory.boolValue ? "it is a directory" : access(junit, W_OK) != 0 ? "it is not writable" : nil
            : access(parent.isEmpty ? "." : parent, W_OK) != 0 ? "its directory does not exist or is not writable" : nil
        if let why { throw CLIError.failure("cannot write the JUnit report to \(junit): \(why)") }
    }
    // Stopped by a signal, the scenario running then leaves no relay, actor or hub behind.
    let leftovers = Leftovers()
    // (A dispatch source catches the signal on its own: no SIG_IGN, which every process the
    // harness starts would inherit. A hang-up ignored from the start, as under nohup, stays so.)
    let stops = [SIGINT, SIGTERM] + (cs_signal_ignored(SIGHUP) != 0 ? [] : [SIGHUP])
    let signals = stops.map { sig in
        let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
        source.setEventHandler { leftovers.stop(status: 128 + sig) }
        source.resume()
        return source
    }
    defer { signals.forEach { $0.cancel() } }
    // A reader that goes (`| head`) fails the next write, which stops the harness as a signal would.
    signal(SIGPIPE, SIG_IGN)
    var results: [(name: String, file: String, seconds: Double, failure: String?)] = []
    for file in a.positionals {
        leftovers.say("▶ \(file)")
        let t0 = Date()
        let run = ScenarioRun(file: file, relay: relay, socket: socket, leftovers: leftovers)
        var failure: String?
        do {
            try run.run()
        } catch {
            failure = "\(error)"
        }
        let seconds = Date().timeIntervalSince(t0)
        leftovers.say(failure.map { "✗ FAIL \(run.name): \($0)" } ?? "✓ PASS \(run.name) (\(String(format: "%.1f", seconds)) s)")
        results.append((run.name.isEmpty ? file : run.name, file, seconds, failure))
    }
    leftovers.end()
    let failed = results.filter { $0.failure != nil }.count
    leftovers.say("\(results.count - failed) passed, \(failed) failed")
    if let junit = a.value("--junit") {
        func esc(_ s: String) -> String {
            s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(
                of: "\"", with: "&quot;")
        }
        var xml =
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"permission-harness\" tests=\"\(results.count)\" failures=\"\(failed)\">\n"
        for r in results {
            xml +=
                "  <testcase classname=\"scenarios\" name=\"\(esc(r.name))\" file=\"\(esc(r.file))\" time=\"\(String(format: "%.3f", r.seconds))\""
            xml += r.failure.map { ">\n    <failure message=\"\(esc($0))\"/>\n  </testcase>\n" } ?? "/>\n"
        }
        xml += "</testsuite>\n"
        try writeFile(xml, to: junit)
    }
    return failed == 0 ? 0 : 1
}

/// A guardian that answers every question by a fixed policy.
func scriptedGuardian(_ a: Arguments) async throws -> Int32 {
    guard let family = a.value("--family") else { throw CLIError.usage("guardian needs --family FAMILY") }
    guard let policy = a.value("--policy") else {
        throw CLIError.usage("--policy is required: approve, decline, approve-after:2s, decline-after:2s or never")
    }
    let parts = policy.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
    let timed = ["approve-after", "decline-after"].contains(parts[0])
    guard ["approve", "decline", "never"].contains(parts[0]) && parts.count == 1 || timed && parts.count == 2 else {
        throw CLIError.usage("--policy must be approve, decline, approve-after:2s, decline-after:2s or never")
    }
    guard let delay = timed ? parseSeconds(parts[1]) : 0 else {
        throw CLIError.usage("\(parts[0]) takes a number of seconds from 0 to \(Int(longestSeconds)), such as 2s, not \"\(parts[1])\"")
    }
    let socket = a.value("--socket") ?? RelayConfiguration.defaultSocketPath
    let member = "harness-guardian-\(UUID().uuidString.prefix(6).lowercased())"
    @Sendable func adminRequest(_ request: JSONObject) throws -> JSONObject {
        let admin = try BlockingConnection(path: socket)
        admin.setTimeout(seconds: 10)  // a relay that hangs does not hold a stop up for good
        _ = try admin.request(["type": "hello", "protocol": 1, "admin": true])
        return try admin.request(request)
    }
    // Stopped (status 130 for Ctrl-C), it leaves the family: runs do not pile up guardians.
    // In place before it joins: a signal during the join still removes what it added.
    let center = Mutex<GuardianCenter?>(nil)
    let stop = stopOnSignals { _ in
        await center.withLock { $0 }?.close()
        let left = Result { try adminRequest(["type": "removeMember", "member": .string(member)]) }
        if case .success(let r) = left, r["type"]?.string != "error" || r["code"]?.string == "notFound" { return }
        let why = (try? left.get()).map { $0["message"]?.string ?? "" } ?? "the relay is out of reach"
        printErr("could not remove \(member) from \(family) (\(why)): `permission-relay member remove \(member)` does it")
    }
    let r = try adminRequest(["type": "addMember", "family": .string(family), "member": .string(member), "role": "guardian"])
    guard let token = r["token"]?.string else { throw CLIError.failure("could not join \(family): \(r["message"]?.string ?? "")") }
    printErr("joined \(family) as \(member); policy \(policy) (Ctrl-C to stop: it then leaves the family)")
    let guardian = GuardianCenter(configuration: RelayConfiguration(socketPath: socket, member: member, token: token, session: "harness"))
    center.withLock { $0 = guardian }
    let notices = reportConnectionTrouble(guardian.connectionStates(), program: "permission-harness") { guardian.connectionError }
    defer { notices.cancel() }
    for await q in guardian.questions() {
        guard parts[0] != "never" else {
            printOut("\(q.id): left unanswered")
            continue
        }
        let approve = parts[0].hasPrefix("approve")
        let choice = q.choices.first { $0.answer == (approve ? .approval : .denial) }!
        Task {
            if delay > 0 { try? await Task.sleep(for: .seconds(delay)) }
            do {
                try await guardian.answer(q, with: choice)
                printOut("\(q.id): \(terminalSafe(choice.id))")
            } catch {
                printErr("\(q.id): \(ClientOptions.describe(error))")
            }
        }
    }
    await stop.claimEnd()  // a signal ends the questions (its cleanup closes the center): its status, not 0
    return 0
}

exit(
    await runMain(program: "permission-harness") {
        let args = Array(CommandLine.arguments.dropFirst())
        guard !args.isEmpty else { throw CLIError.usage("no command given: run or guardian") }
        if args.contains("-h") || args.contains("--help") {
            printOut(usage)
            return 0
        }
        let rest = Array(args.dropFirst())
        switch args[0] {
        case "run":
            let a = try Arguments(rest, valueFlags: ["--socket", "--junit", "--relay"], switchFlags: [])
            guard !a.positionals.isEmpty else { throw CLIError.usage("run needs at least one scenario file") }
            return try runScenarios(a)
        case "guardian":
            return try await scriptedGuardian(try Arguments(rest, valueFlags: ["--family", "--policy", "--socket"], switchFlags: []))
        case "actor":
            let a = try Arguments(rest, valueFlags: ClientOptions.valueFlags.union(["--role"]), switchFlags: [])
            return await Actor.run(
                role: a.value("--role") ?? "child", configuration: try ClientOptions.configuration(a, app: "permission-harness"))
        default:
            throw CLIError.usage("unknown command \"\(args[0])\"")
        }
    })
