// An actor process: one child or guardian session driven by the harness through JSON
// lines on stdin, answering on stdout, and reporting everything its session receives.
// It uses the PermissionKit library, so scenarios exercise the real client code.

import ClientCommands
import Foundation
import PermissionKit
import RelayProtocol

enum Actor {
    static func run(role: String, configuration: RelayConfiguration) async -> Int32 {
        let out = LineWriter()
        if role == "child" {
            let center = AskCenter(configuration: configuration)
            let streams = [
                Task {
                    for await r in center.responses(for: CommunicationTopic.self) {
                        out.emit([
                            "event": "response", "id": .string(r.question.id.uuidString), "choice": .string(r.choice.id),
                            "guardian": .string(r.guardian),
                        ])
                    }
                },
                Task {
                    for await r in center.responses(for: SignificantAppUpdateTopic.self) {
                        out.emit([
                            "event": "response", "id": .string(r.question.id.uuidString), "choice": .string(r.choice.id),
                            "guardian": .string(r.guardian),
                        ])
                    }
                },
                Task {
                    for await o in center.outcomes() {
                        out.emit(["event": "outcome", "id": .string(o.questionID.uuidString), "reason": .string(o.reason.rawValue)])
                    }
                },
            ]
            await serve(out) { op, cmd in try await child(op, cmd, center) }
            // A clean stop lets each loop come back for its next event: what it was handed
            // is then recorded as processed (the library's delivery guarantee).
            for t in streams { t.cancel() }
            for t in streams { await t.value }
            await center.close()
        } else {
            let center = GuardianCenter(configuration: configuration)
            let streams = [
                Task {
                    for await q in center.questions() {
                        out.emit([
                            "event": "question", "id": .string(q.id.uuidString), "child": .string(q.child),
                            "attempt": .int(Int64(q.attempt)),
                        ])
                    }
                },
                Task {
                    for await c in center.closedQuestions() {
                        var o: JSONObject = ["event": "closed", "id": .string(c.questionID.uuidString), "reason": .string(c.reason)]
                        if let by = c.by { o["by"] = .string(by) }
                        if let choice = c.choice { o["choice"] = .string(choice.id) }
                        out.emit(o)
                    }
                },
            ]
            await serve(out) { op, cmd in try await guardian(op, cmd, center) }
            for t in streams { t.cancel() }
            await center.close()
        }
        return 0
    }

    /// Reads commands until stdin closes; each gets one `{"reply": n, …}` line.
    private static func serve(_ out: LineWriter, _ handle: @escaping @Sendable (String, JSON) async throws -> JSONObject) async {
        out.emit(["event": "started"])
        while let line = readLine() {
            guard let cmd = try? JSON.parse(line), let op = cmd["op"]?.string, let n = cmd["n"] else { continue }
            var reply: JSONObject
            do {
                reply = try await handle(op, cmd)
                reply["ok"] = true
            } catch let e as RelayError {
                reply = ["ok": false, "code": .string(e.code), "message": .string(e.message)]
            } catch let e as AskError {
                reply = ["ok": false, "code": .string(askCode(e)), "message": .string(ClientOptions.describe(e))]
            } catch {
                reply = ["ok": false, "code": "error", "message": .string("\(error)")]
            }
            reply["reply"] = n
            out.emit(reply)
        }
    }

    static func askCode(_ e: AskError) -> String {
        switch e {
        case .unknown: return "unknown"
        case .communicationLimitsNotEnabled: return "communicationLimitsNotEnabled"
        case .contactSyncNotSetup: return "contactSyncNotSetup"
        case .invalidQuestion: return "invalidQuestion"
        case .systemError: return "systemError"
        case .notAvailable: return "notAvailable"
        }
    }

    private static func child(_ op: String, _ cmd: JSON, _ center: AskCenter) async throws -> JSONObject {
        switch op {
        case "ask":
            let spec = cmd["question"] ?? .object([:])
            let id = spec["id"]?.string.flatMap(UUID.init(uuidString:)) ?? UUID()
            let choices = (spec["choices"]?.array ?? []).compactMap { c -> PermissionChoice? in
                guard let cid = c["id"]?.string, let title = c["title"]?.string,
                    let answer = c["answer"]?.string.flatMap(PermissionChoice.Answer.init(rawValue:))
                else { return nil }
                return PermissionChoice(id: cid, title: title, answer: answer, durationSeconds: c["durationSeconds"]?.int.map(Int.init))
            }
            let all = choices.isEmpty ? [PermissionChoice.approve, .decline] : choices
            let def = spec["defaultChoice"]?.string.flatMap { d in all.first { $0.id == d } }
            let expiry = spec["expiresIn"]?.number.map { Date().addingTimeInterval($0) }
            let receipt: AskReceipt
            if let description = spec["update"]?.string {
                receipt = try await center.submit(
                    PermissionQuestion(
                        id: id, topic: SignificantAppUpdateTopic(description: description), choices: all, defaultChoice: def,
                        expirationDate: expiry))
            } else {
                let people = try (spec["handles"]?.array ?? []).compactMap(\.string).map {
                    CommunicationTopic.PersonInformation(handle: try parseHandle($0))
                }
                let actions = Set(
                    (spec["actions"]?.array ?? []).compactMap { $0.string.flatMap(CommunicationTopic.Action.init(rawValue:)) })
                receipt = try await center.submit(
                    PermissionQuestion(
                        id: id, topic: CommunicationTopic(personInformation: people, actions: actions), choices: all, defaultChoice: def,
                        expirationDate: expiry))
            }
            return ["status": .string(receipt.status), "attempt": .int(Int64(receipt.attempt)), "allKnown": .bool(receipt.allKnown)]
        case "cancel":
            try await center.cancel(questionID: UUID(uuidString: cmd["id"]?.string ?? "") ?? UUID())
            return [:]
        case "known":
            let handles = try (cmd["handles"]?.array ?? []).compactMap(\.string).map(parseHandle)
            let known = try await center.knownHandles(in: Set(handles))
            return ["known": .array(handles.filter(known.contains).map { .string($0.value) })]
        case "limits":
            return ["enabled": .bool(try await center.limitsEnabled())]
        case "questions":
            return [
                "questions": .array(
                    try await center.questions().map { .object(["id": .string($0.id.uuidString), "status": .string($0.status)]) })
            ]
        default:
            throw RelayError(code: "badRequest", message: "a child actor cannot \(op)", details: [:])
        }
    }

    private static func guardian(_ op: String, _ cmd: JSON, _ center: GuardianCenter) async throws -> JSONObject {
        switch op {
        case "answer":
            try await center.answer(UUID(uuidString: cmd["id"]?.string ?? "") ?? UUID(), with: cmd["choice"]?.string ?? "")
            return [:]
        case "setLimits":
            try await center.setCommunicationLimits(for: cmd["child"]?.string ?? "", enabled: cmd["enabled"]?.bool ?? true)
            return [:]
        case "addKnown", "removeKnown":
            let handles = try (cmd["handles"]?.array ?? []).compactMap(\.string).map(parseHandle)
            let child = cmd["child"]?.string ?? ""
            let n =
                op == "addKnown"
                ? try await center.addKnownHandles(handles, for: child) : try await center.removeKnownHandles(handles, for: child)
            return ["known": .int(Int64(n))]
        case "pending":
            return [
                "questions": .array(
                    try await center.pending().map { .object(["id": .string($0.id.uuidString), "child": .string($0.child)]) })
            ]
        case "history":
            return [
                "questions": .array(
                    try await center.history().map { q in
                        var o: JSONObject = ["id": .string(q.id.uuidString), "status": .string(q.status)]
                        if let a = q.answer { o["choice"] = .string(a.choice.id); o["by"] = .string(a.guardian) }
                        return .object(o)
                    })
            ]
        default:
            throw RelayError(code: "badRequest", message: "a guardian actor cannot \(op)", details: [:])
        }
    }
}

/// Writes whole JSON lines to stdout, one at a time.
final class LineWriter: Sendable {
    private let lock = NSLock()
    func emit(_ o: JSONObject) {
        lock.lock()
        defer { lock.unlock() }
        FileHandle.standardOutput.write(Data((JSON.object(o).text + "\n").utf8))
    }
}
