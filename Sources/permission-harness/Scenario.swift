// Runs one scenario file: its own relay (or a running one; or one relay per device,
// linked through a hub), its families, one OS process per actor, and its steps in
// order, printing a timeline. A failing step says what was expected and what came
// instead, and ends the scenario.

import CLISupport
import Foundation
import Glibc
import RelayProtocol
import RelayServer

struct ScenarioFailure: Error, CustomStringConvertible {
    let description: String
}

/// The processes and directory of the scenario running now: what a signal that stops the
/// harness must stop and remove (the scenario's own cleanup never runs then). Its report
/// goes through it too, so that once a signal has begun stopping the harness nothing else
/// is printed (a scenario whose relay the stop killed would report a failure) and the
/// harness does not end before its leftovers are gone.
final class Leftovers: @unchecked Sendable {
    /// Guarded by `lock`.
    private var processes: [Process] = []
    private var dir: String?
    private var stopping = false
    private let lock = NSLock()
    /// Held while the report is written, and for good by a stop: recursive, so that the
    /// harness's last lines can be written once it has taken it for good (`end`).
    private let ending = NSRecursiveLock()

    func started(_ p: Process) {
        lock.lock()
        guard !stopping else {
            lock.unlock()
            kill(p.processIdentifier, SIGKILL)  // started as a stop began: it goes too
            return
        }
        processes.append(p)
        lock.unlock()
    }
    func using(_ dir: URL) {
        lock.lock()
        defer { lock.unlock() }
        processes = []
        self.dir = dir.path
    }

    /// Writes a line of the report; output that cannot be written stops the harness, status 1.
    func say(_ line: String) {
        ending.lock()
        defer { ending.unlock() }
        guard let failure = writeOut(line) else { return }
        if !failure.readerGone { printErr("permission-harness: cannot write the output: \(failure)") }
        stop(status: 1)
    }

    /// Kills what still runs (SIGKILL, as the scenario's own cleanup does; a process already
    /// ended is not signalled, lest its number be another's by now), removes the directory,
    /// and ends the harness with `status`.
    func stop(status: Int32) -> Never {
        ending.lock()  // for good: the process ends here
        lock.lock()
        stopping = true
        let running = processes.filter(\.isRunning)
        let dir = self.dir
        lock.unlock()
        for p in running { kill(p.processIdentifier, SIGKILL) }
        for p in running { p.waitUntilExit() }
        if let dir { try? FileManager.default.removeItem(atPath: dir) }
        exit(status)
    }

    /// The scenarios are over: a signal from now on waits for the harness's own end.
    func end() { ending.lock() }
}

/// One device's relay: its socket, data directory and process, and its link to the hub.
struct DeviceRelay {
    let socket: String
    let data: String
    var process: Process?
    var link: LinkProxy?
}

final class ScenarioRun {
    let file: String
    /// The relay to start (nil with a running relay at `socket`).
    let relayExecutable: URL?
    let externalSocket: String?
    private var dir: URL
    /// The relays by device: one, named "", unless the scenario names devices.
    private var relays: [String: DeviceRelay] = [:]
    /// Each member's device.
    private var deviceOf: [String: String] = [:]
    private var hub: HubServer?
    private var relayFlags: [String] = ["--ask-rate-limit", "0"]
    /// Each member's token on its device's relay.
    private var tokens: [String: String] = [:]
    private var roles: [String: String] = [:]
    private var actors: [String: ActorProcess] = [:]
    private var ids: [String: String] = [:]
    /// By actor: requests sent with `"reply": "later"` (reply number, what, when), oldest first.
    private var laterReplies: [String: [(n: Int, text: String, sent: Date)]] = [:]
    private let started = Date()
    private let suffix: String
    private(set) var name = ""

    private let leftovers: Leftovers

    init(file: String, relay: URL?, socket: String?, leftovers: Leftovers) {
        self.file = file
        relayExecutable = relay
        externalSocket = socket
        self.leftovers = leftovers
        dir = URL(fileURLWithPath: "/tmp").appendingPathComponent("harness-\(UUID().uuidString.prefix(8))")
        leftovers.using(dir)
        relays[""] = DeviceRelay(
            socket: socket ?? dir.appendingPathComponent("relay.sock").path, data: dir.appendingPathComponent("data").path)
        suffix = socket == nil ? "" : "-" + UUID().uuidString.prefix(6).lowercased()
    }

    deinit {
        for a in actors.values { a.kill() }
        for r in relays.values {
            if let p = r.process, p.isRunning { kill(p.processIdentifier, SIGKILL) }
            r.link?.close()
        }
        hub?.kill()
        try? FileManager.default.removeItem(at: dir)
    }

    private func log(_ who: String, _ text: String) {
        let t = String(format: "%7.3fs", Date().timeIntervalSince(started))
        leftovers.say("  \(t)  \(who.padding(toLength: 12, withPad: " ", startingAt: 0)) \(text)")
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
        try ScenarioShape.check(s)
        name = s["name"]?.string ?? name
        if let flags = s["relayFlags"]?.array { relayFlags = flags.compactMap(\.string) }
        // Checked before anything is added to a running relay, which such a step would leave half done.
        let ownRelaySteps: Set = ["kill-relay", "start-relay", "kill-hub", "start-hub", "cut-link", "restore-link"]
        if externalSocket != nil, let step = s["steps"]?.array?.lazy.compactMap({ $0["do"]?.string }).first(where: ownRelaySteps.contains) {
            throw ScenarioFailure(description: "its step \"\(step)\" needs the harness's own relay (run it without --socket)")
        }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        if let devices = s["devices"]?.object { try setUpDevices(devices) }
        if externalSocket == nil { for device in relays.keys.sorted() { try startRelay(device) } }
        for device in relays.keys.sorted() { try provision(s["families"]?.object ?? [:], on: device) }
        for (i, step) in (s["steps"]?.array ?? []).enumerated() {
            guard let step = step.object, let what = step["do"]?.string else { continue }  // ScenarioShape refuses it
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

    /// `"devices": {"tablet": ["alex"], "laptop": ["sam"]}`: a relay per device, each
    /// member on one, linked through a hub.
    private func setUpDevices(_ devices: JSONObject) throws {
        guard externalSocket == nil else {
            throw ScenarioFailure(description: "a scenario with devices runs its own relays (run without --socket)")
        }
        let hub = try HubServer(directory: dir, started: leftovers.started)
        self.hub = hub
        relays = [:]
        for (device, members) in devices.fields.map({ ($0.key, $0.value) }) {
            guard !device.isEmpty, let members = members.array?.compactMap(\.string) else {
                throw ScenarioFailure(description: "\"devices\" maps each device's name to its members, such as {\"tablet\": [\"alex\"]}")
            }
            relays[device] = DeviceRelay(
                socket: dir.appendingPathComponent("\(device).sock").path, data: dir.appendingPathComponent("\(device)-data").path,
                link: try LinkProxy(to: hub.port))
            for m in members { deviceOf[m] = device }
        }
        log("harness", "hub on port \(hub.port); devices \(JSON.object(devices).text)")
    }

    /// The device a step names (`"device"`), or the only one.
    private func device(_ step: JSONObject) throws -> String {
        if let named = step["device"]?.string {
            guard relays[named] != nil else { throw ScenarioFailure(description: "no device \(named) in the scenario") }
            return named
        }
        guard relays.count == 1, let only = relays.keys.first else {
            throw ScenarioFailure(description: "which device? name one: \(relays.keys.sorted().joined(separator: ", "))")
        }
        return only
    }

    private func startRelay(_ device: String) throws {
        guard externalSocket == nil, let relayExecutable, let r = relays[device] else {
            throw ScenarioFailure(description: "this step needs the harness's own relay (run without --socket)")
        }
        let p = Process()
        p.executableURL = relayExecutable
        p.arguments = ["serve", "--socket", r.socket, "--data", r.data] + relayFlags
        if let link = r.link { p.arguments! += ["--hub", "nats://127.0.0.1:\(link.port)", "--device", device] }
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try p.run()
        leftovers.started(p)
        var seen = ""
        while !seen.contains("listening") {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { throw ScenarioFailure(description: "the relay did not start") }
            seen += String(decoding: chunk, as: UTF8.self)
        }
        relays[device]?.process = p
    }

    /// Makes the families on `device`'s relay; each member's token is that of its own device.
    private func provision(_ families: JSONObject, on device: String) throws {
        let admin = try BlockingConnection(path: relays[device]!.socket)
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
                    if (deviceOf[m] ?? "") == device { tokens[m] = t }
                    roles[m] = role
                }
            }
            // On a shared relay, the name it has there (its members' names take the same suffix).
            let named = suffix.isEmpty ? family : "\(family) (\(family + suffix) on the relay)"
            log("harness", "family \(named)\(device.isEmpty ? "" : " on \(device)"): \(spec.text)")
        }
    }

    // MARK: - Actors

    /// `alex` or `alex@tablet` (member alex, session tablet).
    private func actor(_ name: String) throws -> ActorProcess {
        if let a = actors[name], a.process.isRunning { return a }
        let parts = name.split(separator: "@", maxSplits: 1).map(String.init)
        let member = parts[0]
        guard let token = tokens[member], let role = roles[member], let socket = relays[deviceOf[member] ?? ""]?.socket else {
            throw ScenarioFailure(description: "no member \(member) in the scenario's families\(relays.count > 1 ? " and devices" : "")")
        }
        let a = try ActorProcess(
            name: name, executable: harnessExecutable,
            arguments: [
                "actor", "--role", role, "--socket", socket, "--member", member + suffix,
                "--session", parts.count > 1 ? parts[1] : "main", "--state-dir", dir.appendingPathComponent("state").path,
            ], environment: ["PERMISSION_TOKEN": token, "PERMISSION_CREDENTIALS": ""])
        leftovers.started(a.process)
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
        case "await-reply":
            guard var waiting = laterReplies[who], !waiting.isEmpty else {
                throw ScenarioFailure(description: "\(who) has no request sent with \"reply\": \"later\"")
            }
            let (n, text, sent) = waiting.removeFirst()
            laterReplies[who] = waiting
            try checkReply(who, try actor(who), n, text, step, timeout, since: sent)
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
            let device = try device(step)
            guard let r = relays[device]?.process else {
                throw ScenarioFailure(description: "this step needs the harness's own relay (run without --socket)")
            }
            kill(r.processIdentifier, SIGKILL)
            r.waitUntilExit()
            log("harness", "relay\(device.isEmpty ? "" : " on \(device)") killed (SIGKILL)")
        case "start-relay":
            let t0 = Date()
            let device = try device(step)
            try startRelay(device)
            log("harness", "relay\(device.isEmpty ? "" : " on \(device)") started  (\(ms(since: t0)))")
        case "kill-hub", "start-hub":
            guard let hub else { throw ScenarioFailure(description: "\(what) needs a scenario with \"devices\"") }
            if what == "kill-hub" { hub.kill() } else { try hub.start() }
            log("harness", what == "kill-hub" ? "hub killed (SIGKILL)" : "hub started")
        case "cut-link", "restore-link":
            let device = try device(step)
            guard let link = relays[device]?.link else { throw ScenarioFailure(description: "\(what) needs a scenario with \"devices\"") }
            link.setCut(what == "cut-link")
            log("harness", "link of \(device) to the hub \(what == "cut-link" ? "cut" : "restored")")
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

    /// Sends a command and checks its reply against the step's `expect` (default: ok); with
    /// `"reply": "later"`, only sends it: an `await-reply` step checks its reply.
    private func call(_ who: String, _ text: String, _ cmd: JSONObject, _ step: JSONObject, _ timeout: Double) throws {
        let a = try actor(who)
        let n = a.send(cmd)
        if step["reply"]?.string == "later" {
            laterReplies[who, default: []].append((n, text, Date()))
            log(who, "\(text) → sent (its reply awaited later)")
            return
        }
        try checkReply(who, a, n, text, step, timeout, since: Date())
    }

    /// The reply to command `n` of `who`, checked against the step's `expect`.
    private func checkReply(
        _ who: String, _ a: ActorProcess, _ n: Int, _ text: String, _ step: JSONObject, _ timeout: Double, since t0: Date
    ) throws {
        guard let reply = a.reply(to: n, timeout: timeout).map(plain) else {
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
