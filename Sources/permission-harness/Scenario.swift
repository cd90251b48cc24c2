// Runs one scenario file: its own relay (or a running one), its families, one OS
// process per actor, and its steps in order, printing a timeline. A failing step says
// what was expected and what came instead, and ends the scenario.

import CLISupport
import Foundation
import Glibc
import RelayProtocol
import RelayServer

struct ScenarioFailure: Error, CustomStringConvertible {
    let description: String
}

final class ScenarioRun {
    let file: String
    /// The relay to start (nil with a running relay at `socket`).
    let relayExecutable: URL?
    let externalSocket: String?
    private var dir: URL
    private var relay: Process?
    private var socket: String
    private var relayFlags: [String] = ["--ask-rate-limit", "0"]
    private var tokens: [String: String] = [:]
    private var roles: [String: String] = [:]
    private var actors: [String: ActorProcess] = [:]
    private var ids: [String: String] = [:]
    private let started = Date()
    private let suffix: String
    private(set) var name = ""

    init(file: String, relay: URL?, socket: String?) {
        self.file = file
        relayExecutable = relay
        externalSocket = socket
        dir = URL(fileURLWithPath: "/tmp").appendingPathComponent("harness-\(UUID().uuidString.prefix(8))")
        self.socket = socket ?? dir.appendingPathComponent("relay.sock").path
        suffix = socket == nil ? "" : "-" + UUID().uuidString.prefix(6).lowercased()
    }

    deinit {
        for a in actors.values { a.kill() }
        if let r = relay, r.isRunning { kill(r.processIdentifier, SIGKILL) }
        try? FileManager.default.removeItem(at: dir)
    }

    private func log(_ who: String, _ text: String) {
        let t = String(format: "%7.3fs", Date().timeIntervalSince(started))
        printOut("  \(t)  \(who.padding(toLength: 12, withPad: " ", startingAt: 0)) \(text)")
    }

    func run() throws {
        name = (file as NSString).lastPathComponent
        guard let data = FileManager.default.contents(atPath: file) else {
            var isDirectory: ObjCBool = false
            let why =
                !FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory)
                ? "no such file" : isDirectory.boolValue ? "it is a directory" : "it cannot be read"
            throw ScenarioFailure(description: "cannot read the scenario \(file): \(why)")
        }
        let parsed: JSON
        do {
            parsed = try JSON.parse(Array(data))
        } catch {
            throw ScenarioFailure(description: "the scenario \(file) is not valid JSON: \(error)")
        }
        guard let s = parsed.object else { throw ScenarioFailure(description: "the scenario \(file) is not a JSON object") }
        name = s["name"]?.string ?? name
        if let flags = s["relayFlags"]?.array { relayFlags = flags.compactMap(\.string) }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        if externalSocket == nil { try startRelay() }
        try provision(s["families"]?.object ?? [:])
        for (i, step) in (s["steps"]?.array ?? []).enumerated() {
            guard let step = step.object, let what = step["do"]?.string else {
                throw ScenarioFailure(description: "step \(i + 1) has no \"do\"")
            }
            do {
                try perform(what, step)
            } catch let f as ScenarioFailure {
                throw ScenarioFailure(description: "step \(i + 1) (\(what)): \(f.description)")
            }
        }
        for a in actors.values { a.stop() }
        actors = [:]
    }

    // MARK: - Relay and families

    private func startRelay() throws {
        guard externalSocket == nil, let relayExecutable else {
            throw ScenarioFailure(description: "this step needs the harness's own relay (run without --socket)")
        }
        let p = Process()
        p.executableURL = relayExecutable
        p.arguments = ["serve", "--socket", socket, "--data", dir.appendingPathComponent("data").path] + relayFlags
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try p.run()
        var seen = ""
        while !seen.contains("listening") {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { throw ScenarioFailure(description: "the relay did not start") }
            seen += String(decoding: chunk, as: UTF8.self)
        }
        relay = p
    }

    private func provision(_ families: JSONObject) throws {
        let admin = try BlockingConnection(path: socket)
        admin.setTimeout(seconds: 10)
        _ = try admin.request(["type": "hello", "protocol": 1, "admin": true])
        for (family, spec) in families.fields.map({ ($0.key, $0.value) }) {
            _ = try admin.request(["type": "createFamily", "family": .string(family + suffix)])
            for (role, key) in [("guardian", "guardians"), ("child", "children")] {
                for m in (spec[key]?.array ?? []).compactMap(\.string) {
                    let r = try admin.request([
                        "type": "addMember", "family": .string(family + suffix), "member": .string(m + suffix), "role": .string(role),
                    ])
                    guard let t = r["token"]?.string else {
                        throw ScenarioFailure(description: "could not add \(m): \(JSON.object(r).text)")
                    }
                    tokens[m] = t
                    roles[m] = role
                }
            }
            log("harness", "family \(family): \(spec.text)")
        }
    }

    // MARK: - Actors

    /// `alex` or `alex@tablet` (member alex, session tablet).
    private func actor(_ name: String) throws -> ActorProcess {
        if let a = actors[name], a.process.isRunning { return a }
        let parts = name.split(separator: "@", maxSplits: 1).map(String.init)
        let member = parts[0]
        guard let token = tokens[member], let role = roles[member] else {
            throw ScenarioFailure(description: "no member \(member) in the scenario's families")
        }
        let a = try ActorProcess(
            name: name, executable: harnessExecutable,
            arguments: [
                "actor", "--role", role, "--socket", socket, "--member", member + suffix, "--token", token,
                "--session", parts.count > 1 ? parts[1] : "main", "--state-dir", dir.appendingPathComponent("state").path,
            ])
        guard a.take(timeout: 10, { $0["event"]?.string == "started" }) != nil else {
            throw ScenarioFailure(description: "actor \(name) did not start")
        }
        actors[name] = a
        return a
    }

    private func uuid(_ symbol: String) -> String {
        if let u = ids[symbol] { return u }
        let u = UUID().uuidString
        ids[symbol] = u
        return u
    }

    private func symbol(_ uuid: String) -> String { ids.first { $0.value == uuid }?.key ?? uuid }

    // MARK: - Steps

    /// A step's duration in seconds under `key`: `fallback` when it is absent, and a failure
    /// that says so when it is not a number of seconds (a typo must not pass as the default).
    private func seconds(_ step: JSONObject, _ key: String, default fallback: Double) throws -> Double {
        guard let value = step[key] else { return fallback }
        guard let s = value.number, s >= 0, s <= 86400 else {
            throw ScenarioFailure(description: "\"\(key)\" must be a number of seconds from 0 to 86400, not \(value.text)")
        }
        return s
    }

    private func perform(_ what: String, _ step: JSONObject) throws {
        let who = step["actor"]?.string ?? "harness"
        let timeout = try seconds(step, "timeout", default: 10)
        switch what {
        case "ask":
            var q = step["question"]?.object ?? [:]
            let sym = q["id"]?.string ?? "Q\(ids.count + 1)"
            q["id"] = .string(uuid(sym))
            try call(who, "ask \(sym)", ["op": "ask", "question": .object(q)], step, timeout)
        case "cancel":
            try call(
                who, "cancel \(step["id"]?.string ?? "")", ["op": "cancel", "id": .string(uuid(step["id"]?.string ?? ""))], step, timeout)
        case "answer":
            let sym = step["id"]?.string ?? ""
            try call(
                who, "answer \(sym) with \(step["choice"]?.string ?? "")",
                ["op": "answer", "id": .string(uuid(sym)), "choice": step["choice"] ?? ""], step, timeout)
        case "known":
            try call(who, "known? \(step["handles"]?.text ?? "[]")", ["op": "known", "handles": step["handles"] ?? []], step, timeout)
        case "limits":
            try call(who, "limits?", ["op": "limits"], step, timeout)
        case "set-limits":
            try call(
                who, "set limits of \(step["child"]?.string ?? "") to \(step["enabled"]?.bool ?? true)",
                ["op": "setLimits", "child": .string((step["child"]?.string ?? "") + suffix), "enabled": step["enabled"] ?? true], step,
                timeout)
        case "add-known", "remove-known":
            try call(
                who, "\(what) \(step["handles"]?.text ?? "[]") for \(step["child"]?.string ?? "")",
                [
                    "op": what == "add-known" ? "addKnown" : "removeKnown", "child": .string((step["child"]?.string ?? "") + suffix),
                    "handles": step["handles"] ?? [],
                ],
                step, timeout)
        case "history", "pending", "questions":
            try call(who, what, ["op": .string(what)], step, timeout)
        case "await":
            let event = step["event"]?.string ?? ""
            let sym = step["id"]?.string
            let t0 = Date()
            let a = try actor(who)
            let fields = step["fields"]?.object
            let wanted = { (e: JSONObject) in e["event"]?.string == event && (sym == nil || e["id"]?.string == self.uuid(sym!)) }
            guard
                let e = a.take(timeout: timeout, { e in wanted(e) && (try? self.check(fields, against: self.plain(e), what: "")) != nil })
                    .map(plain)
            else {
                let others = a.peek(wanted).map { JSON.object(plain($0)).text }
                throw ScenarioFailure(
                    description:
                        "\(who) expected a \(event) event\(sym.map { " for \($0)" } ?? "")\(fields.map { " with \(JSON.object($0).text)" } ?? "") within \(timeout) s; "
                        + (others.isEmpty ? "nothing came" : "came instead: \(others.joined(separator: ", "))"))
            }
            log(who, "got \(event) \(e["id"]?.string.map(symbol) ?? "")\(describe(e))  (\(ms(since: t0)))")
        case "no-event":
            let event = step["event"]?.string ?? ""
            let sym = step["id"]?.string
            let window = try seconds(step, "within", default: 1)
            if let e = try actor(who).take(
                timeout: window, { e in e["event"]?.string == event && (sym == nil || e["id"]?.string == self.uuid(sym!)) })
            {
                throw ScenarioFailure(description: "\(who) expected no \(event) event within \(window) s, got \(JSON.object(e).text)")
            }
            log(who, "no \(event) \(sym ?? "") within \(window) s, as expected")
        case "kill-relay":
            guard let r = relay else {
                throw ScenarioFailure(description: "this step needs the harness's own relay (run without --socket)")
            }
            kill(r.processIdentifier, SIGKILL)
            r.waitUntilExit()
            log("harness", "relay killed (SIGKILL)")
        case "start-relay":
            let t0 = Date()
            try startRelay()
            log("harness", "relay started  (\(ms(since: t0)))")
        case "stop-actor":
            actors.removeValue(forKey: who)?.stop()
            log(who, "stopped")
        case "kill-actor":
            actors.removeValue(forKey: who)?.kill()
            log(who, "killed (SIGKILL)")
        case "start-actor":
            _ = try actor(who)
            log(who, "started")
        case "sleep":
            let s = try seconds(step, "seconds", default: 1)
            Thread.sleep(forTimeInterval: s)
            log("harness", "slept \(s) s")
        default:
            throw ScenarioFailure(description: "unknown step \"\(what)\"")
        }
    }

    /// Sends a command and checks its reply against the step's `expect` (default: ok).
    private func call(_ who: String, _ text: String, _ cmd: JSONObject, _ step: JSONObject, _ timeout: Double) throws {
        let t0 = Date()
        let a = try actor(who)
        guard let reply = a.call(cmd, timeout: timeout).map(plain) else {
            throw ScenarioFailure(description: "\(who): no reply to \(text) within \(timeout) s")
        }
        let outcome = reply["ok"]?.bool == true ? "ok" : "error \(reply["code"]?.string ?? "?")"
        log(who, "\(text) → \(outcome)\(describe(reply))  (\(ms(since: t0)))")
        switch step["expect"] {
        case nil, .string("ok")?:
            guard reply["ok"]?.bool == true else {
                throw ScenarioFailure(
                    description: "\(who): expected ok for \(text), got \(reply["code"]?.string ?? "?"): \(reply["message"]?.string ?? "")")
            }
        case .object(let e)?:
            if let code = e["error"]?.string {
                guard reply["ok"]?.bool == false, reply["code"]?.string == code else {
                    throw ScenarioFailure(description: "\(who): expected error \(code) for \(text), got \(outcome)")
                }
            } else {
                guard reply["ok"]?.bool == true else {
                    throw ScenarioFailure(description: "\(who): expected ok for \(text), got \(outcome): \(reply["message"]?.string ?? "")")
                }
                try check(e, against: reply, what: "\(who)'s reply to \(text)")
            }
        default:
            throw ScenarioFailure(description: "\"expect\" must be \"ok\" or an object")
        }
    }

    /// Every field of `expected` must equal the same field of `got`; a list of question
    /// symbols (`["Q1"]`) matches the ids it names, in any order.
    private func check(_ expected: JSONObject?, against got: JSONObject, what: String) throws {
        for f in expected?.fields ?? [] {
            var want = f.value
            var have = got[f.key] ?? .null
            if f.key == "questions", case .array(let syms) = want {
                want = .array(syms.compactMap(\.string).map { .string(uuid($0)) }.sorted { $0.text < $1.text })
                have = .array((have.array ?? []).compactMap { $0["id"] }.sorted { $0.text < $1.text })
            }
            if f.key == "statuses", case .object(let m) = want {
                let list = got["questions"]?.array ?? []
                for (sym, status) in m.fields.map({ ($0.key, $0.value) }) {
                    let s = list.first { $0["id"]?.string == uuid(sym) }?["status"] ?? .null
                    if s != status { throw ScenarioFailure(description: "\(what): expected \(sym) to be \(status.text), got \(s.text)") }
                }
                continue
            }
            if have != want {
                throw ScenarioFailure(description: "\(what): expected \(f.key) \(want.text), got \(have.text)")
            }
        }
    }

    private func describe(_ o: JSONObject) -> String {
        let shown = o.fields.filter { !["ok", "reply", "event", "id", "questions", "message"].contains($0.key) }
        return shown.isEmpty ? "" : " " + shown.map { "\($0.key)=\($0.value.string ?? $0.value.text)" }.joined(separator: " ")
    }

    /// Member names as the scenario wrote them (without the suffix added on a shared relay).
    private func plain(_ o: JSONObject) -> JSONObject {
        guard !suffix.isEmpty else { return o }
        var out = o
        for f in o.fields {
            if let v = f.value.string, v.hasSuffix(suffix) { out[f.key] = .string(String(v.dropLast(suffix.count))) }
        }
        return out
    }

    private func ms(since t: Date) -> String { String(format: "%.0f ms", Date().timeIntervalSince(t) * 1000) }
}
