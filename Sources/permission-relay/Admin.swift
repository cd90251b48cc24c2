// The admin subcommands: each opens an admin session on a running relay (allowed
// for the relay's own user and root, checked with SO_PEERCRED), sends one request
// and prints the result, as text or as one JSON object with --json.

import CLISupport
import RelayProtocol
import RelayServer

struct AdminCommand: Sendable {
    let words: [String]
    let arguments: [String]
    let extraFlags: Set<String>
    let summary: String
    let examples: [String]
    /// Builds the request from the positionals and flags.
    let request: @Sendable ([String], Arguments) throws -> JSONObject
    /// A human-readable line from the ok reply.
    let describe: @Sendable (JSONObject) -> String

    var usage: String {
        let flags = extraFlags.sorted().map { $0 == "--role" ? " --role child|guardian" : " \($0) VALUE" }.joined()
        return """
            OVERVIEW: \(summary)

            USAGE: permission-relay \(words.joined(separator: " "))\(arguments.map { " \($0)" }.joined())\(flags) [--socket PATH] [--json]

            OPTIONS:
              --socket PATH   The relay's socket (default: \(Paths.defaultSocket))
              --json          Print the reply as one JSON object
              -h, --help      Show this help.

            EXAMPLES:
            \(examples.map { "  " + $0 }.joined(separator: "\n"))
            """
    }

    func run(_ args: [String]) throws {
        let a = try Arguments(args, valueFlags: extraFlags.union(["--socket"]), switchFlags: ["--json"])
        let positionals = try a.expectPositionals(arguments)
        let req = try request(positionals, a)
        let socket = a.value("--socket") ?? Paths.defaultSocket
        let reply: JSONObject
        do {
            let c = try BlockingConnection(path: socket)
            c.setTimeout(seconds: 10)
            let welcome = try c.request(["type": "hello", "protocol": 1, "admin": true])
            guard welcome["type"]?.string == "welcome" else {
                throw CLIError.failure("the relay refused an admin session: \(welcome["message"]?.string ?? welcome.encodedText)")
            }
            reply = try c.request(req)
        } catch let e as ServerError {
            throw CLIError.failure(e.description)
        }
        guard reply["type"]?.string == "ok" else {
            let code = reply["code"]?.string ?? "error"
            if a.has("--json") { printOut(reply.encodedText) }
            throw CLIError.failure("\(code): \(reply["message"]?.string ?? "the relay refused the request")")
        }
        var out = reply
        out["type"] = nil
        out["re"] = nil
        printOut(a.has("--json") ? out.encodedText : describe(out))
    }

    static let all: [AdminCommand] = [
        AdminCommand(
            words: ["family", "create"], arguments: ["FAMILY"], extraFlags: [], summary: "Create a family.",
            examples: ["permission-relay family create smiths"],
            request: { p, _ in ["type": "createFamily", "family": .string(p[0])] },
            describe: { r in "created family \(r["family"]?.string ?? "")" }),
        AdminCommand(
            words: ["member", "add"], arguments: ["FAMILY", "MEMBER"], extraFlags: ["--role"],
            summary: "Add a child or guardian to a family and print its token (shown only once).",
            examples: [
                "permission-relay member add smiths alex --role child",
                "permission-relay member add smiths sam --role guardian --json",
            ],
            request: { p, a in
                guard let role = a.value("--role") else { throw CLIError.usage("--role child|guardian is required") }
                guard role == "child" || role == "guardian" else {
                    throw CLIError.usage("--role must be child or guardian, not \"\(role)\"")
                }
                return ["type": "addMember", "family": .string(p[0]), "member": .string(p[1]), "role": .string(role)]
            },
            describe: { r in
                """
                added \(r["role"]?.string ?? "") \(r["member"]?.string ?? "") to family \(r["family"]?.string ?? "")
                token: \(r["token"]?.string ?? "")
                (keep the token: it is shown only this once)
                """
            }),
        AdminCommand(
            words: ["member", "remove"], arguments: ["MEMBER"], extraFlags: [],
            summary: "Remove a member: its connections close, a child's pending questions are cancelled.",
            examples: ["permission-relay member remove alex"],
            request: { p, _ in ["type": "removeMember", "member": .string(p[0])] },
            describe: { r in "removed \(r["member"]?.string ?? "")" }),
        AdminCommand(
            words: ["token", "rotate"], arguments: ["MEMBER"], extraFlags: [],
            summary: "Issue a new token for a member; the old one stops working at once.",
            examples: ["permission-relay token rotate alex"],
            request: { p, _ in ["type": "rotateToken", "member": .string(p[0])] },
            describe: { r in "new token for \(r["member"]?.string ?? ""): \(r["token"]?.string ?? "")" }),
        AdminCommand(
            words: ["limits", "set"], arguments: ["CHILD", "on|off"], extraFlags: [],
            summary: "Turn a child's communication limits on or off.",
            examples: ["permission-relay limits set alex off"],
            request: { p, _ in
                guard p[1] == "on" || p[1] == "off" else { throw CLIError.usage("the last argument must be on or off") }
                return ["type": "setLimits", "child": .string(p[0]), "enabled": .bool(p[1] == "on")]
            },
            describe: { r in "communication limits \(r["enabled"]?.bool == true ? "on" : "off")" }),
        AdminCommand(
            words: ["status"], arguments: [], extraFlags: [], summary: "Show the running relay's counters.",
            examples: ["permission-relay status", "permission-relay status --json"],
            request: { _, _ in ["type": "status"] },
            describe: { r in
                r.fields.map { "\($0.key): \($0.value.text)" }.joined(separator: "\n")
            }),
    ]
}

extension JSONObject {
    var encodedText: String { String(decoding: encoded, as: UTF8.self) }
}
