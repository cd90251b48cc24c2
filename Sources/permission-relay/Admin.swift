// The admin subcommands: each opens an admin session on a running relay (allowed
// for the relay's own user and root, checked with SO_PEERCRED), sends one request
// and prints the result, as text or as one JSON object with --json. A failure prints
// one line on stderr and nothing on stdout, with --json too (its output often goes to
// a file: a member's credentials), and exits 1.

import CLISupport
import Glibc
import RelayProtocol
import RelayServer

struct AdminCommand: Sendable {
    let words: [String]
    let arguments: [String]
    let extraFlags: Set<String>
    let summary: String
    /// More to know, shown under the summary in the command's help.
    var notes: String = ""
    let examples: [String]
    /// Builds the request from the positionals and flags.
    let request: @Sendable ([String], Arguments) throws -> JSONObject
    /// A human-readable line from the ok reply.
    let describe: @Sendable (JSONObject) -> String
    /// The array field of a reply that may come in pages (`more`, `next`): asked for
    /// again `after` each page's `next` until all of it is there.
    var pagedField: String? = nil

    /// The command's words, arguments and own flags, as its usage and its group's help show them.
    var synopsis: String {
        let flags = extraFlags.sorted { ($0 == "--credentials" ? 1 : 0, $0) < ($1 == "--credentials" ? 1 : 0, $1) }.map { flag in
            switch flag {
            case "--role": " --role child|guardian"
            case "--unix-user": " [--unix-user ACCOUNT]"
            case "--credentials": " [--credentials FILE]"
            default: " \(flag) VALUE"
            }
        }.joined()
        return words.joined(separator: " ") + arguments.map { " \($0)" }.joined() + flags
    }

    var usage: String {
        """
        OVERVIEW: \(summary)
        \(notes.isEmpty ? "" : "\n" + notes + "\n")
        USAGE: permission-relay \(synopsis) [--socket PATH] [--json]

        OPTIONS:
          --socket PATH   The relay's socket (default: \(Paths.clientSocket))
          --json          Print the reply as one JSON object (on failure: nothing, and the
                          error on stderr)
          -h, --help      Show this help.

        EXAMPLES:
        \(examples.map { "  " + $0 }.joined(separator: "\n"))
        """
    }

    func run(_ args: [String]) throws {
        let a = try Arguments(args, valueFlags: extraFlags.union(["--socket"]), switchFlags: ["--json"])
        let positionals = try a.expectPositionals(arguments)
        for (name, value) in zip(arguments, positionals) where ["FAMILY", "MEMBER", "CHILD"].contains(name) {
            guard Identifier.isValid(value) else {
                throw CLIError.usage("\(name) must be 1 to 64 letters, digits, '.', '_' or '-', not \"\(value)\"")
            }
        }
        let req = try request(positionals, a)
        if a.value("--credentials") != nil && a.value("--unix-user") != nil {
            throw CLIError.usage("--credentials is for a token, and a member bound to an account has none: give one or the other")
        }
        // The credentials file is made before anything is changed: a file that cannot be
        // written fails the command while the old token still works.
        let rotated = words == ["token", "rotate"] ? positionals.first : nil
        let credentials = try a.value("--credentials").map { try CredentialsFile(path: $0, replacing: rotated) }
        defer { credentials?.discard() }
        let socket = a.value("--socket") ?? Paths.clientSocket
        if let why = RelayDefaults.distrust(socket) { throw CLIError.failure("will not use \(socket): \(why)") }
        let reply: JSONObject
        do {
            let c = try BlockingConnection(path: socket)
            c.setTimeout(seconds: 10)
            let welcome = try c.request(["type": "hello", "protocol": 1, "admin": true])
            guard welcome["type"]?.string == "welcome" else {
                throw CLIError.failure("the relay refused an admin session: \(welcome["message"]?.string ?? welcome.encodedText)")
            }
            var page = try c.request(req)
            if let field = pagedField {
                var all = page[field]?.array ?? []
                while page["type"]?.string == "ok", page["more"]?.bool == true, let next = page["next"]?.string {
                    var more = req
                    more["after"] = .string(next)
                    page = try c.request(more)
                    all += page[field]?.array ?? []
                }
                page["more"] = nil
                page["next"] = nil
                if page["type"]?.string == "ok" { page[field] = .array(all) }
            }
            reply = page
        } catch let e as ServerError {
            throw CLIError.failure(e.description)
        }
        guard reply["type"]?.string == "ok" else {  // stdout stays empty, also with --json
            let code = reply["code"]?.string ?? "error"
            throw CLIError.failure("\(code): \(reply["message"]?.string ?? "the relay refused the request")")
        }
        var out = reply
        out["type"] = nil
        out["re"] = nil
        if let credentials, let token = out["token"]?.string, let member = out["member"]?.string {
            do {
                try credentials.write(["member": .string(member), "token": .string(token)])
            } catch {
                // The change is made: the token must not be lost with the file.
                printErr("permission-relay: \(member)'s token is \(token) (keep it: it is shown only this once)")
                throw error
            }
            out["token"] = nil  // in the file only
            let added = words == ["member", "add"] ? describe(out).split(separator: "\n")[0] + "\n" : ""
            printOut(a.has("--json") ? out.encodedText : "\(added)credentials of \(member) written to \(credentials.path) (mode 0600)")
            return
        }
        if let failure = writeOut(a.has("--json") ? out.encodedText : describe(out)) {
            // The change is made: a token shown only this once must not be lost with the output.
            if let token = out["token"]?.string, let member = out["member"]?.string {
                printErr("permission-relay: \(member)'s token is \(token) (keep it: it is shown only this once)")
            }
            exitForOutput(failure)
        }
    }

    static let all: [AdminCommand] = [
        AdminCommand(
            words: ["family", "create"], arguments: ["FAMILY"], extraFlags: [], summary: "Create a family.",
            examples: ["permission-relay family create smiths"],
            request: { p, _ in ["type": "createFamily", "family": .string(p[0])] },
            describe: { r in "created family \(r["family"]?.string ?? "")" }),
        AdminCommand(
            words: ["family", "list"], arguments: [], extraFlags: [],
            summary: "List the families and their members.",
            notes: "Each member's role, and whether it is connected; for a child, its limits and pending questions.",
            examples: ["permission-relay family list", "permission-relay family list --json"],
            request: { _, _ in ["type": "families"] },
            describe: { r in describeFamilies(r["families"]?.array ?? []) },
            pagedField: "families"),
        AdminCommand(
            words: ["family", "show"], arguments: ["FAMILY"], extraFlags: [],
            summary: "Show one family's members.",
            examples: ["permission-relay family show smiths"],
            request: { p, _ in ["type": "families", "family": .string(p[0])] },
            describe: { r in describeFamilies(r["families"]?.array ?? []) }),
        AdminCommand(
            words: ["member", "add"], arguments: ["FAMILY", "MEMBER"], extraFlags: ["--role", "--unix-user", "--credentials"],
            summary: "Add a child or guardian to a family and print its token (shown only once).",
            notes: """
                Member ids are unique across all families: an id a member of any family has, or a
                removed member had, is refused (conflict).

                --credentials FILE writes the member's id and token to FILE (mode 0600, as the
                programs' --credentials reads it) instead of printing the token; FILE must be new,
                and a failure leaves no file.

                --unix-user ACCOUNT binds the member to a Unix account (a name or a uid) of the
                relay's machine: the member's programs and apps run by that account connect with
                --member MEMBER and no token (the relay asks the kernel who connects), and no
                token is issued. One member per account.
                """,
            examples: [
                "permission-relay member add smiths alex --role child --credentials alex.json",
                "permission-relay member add smiths sam --role guardian --json",
                "permission-relay member add smiths alex --role child --unix-user alex",
            ],
            request: { p, a in
                guard let role = a.value("--role") else { throw CLIError.usage("--role child|guardian is required") }
                guard role == "child" || role == "guardian" else {
                    throw CLIError.usage("--role must be child or guardian, not \"\(role)\"")
                }
                var req: JSONObject = ["type": "addMember", "family": .string(p[0]), "member": .string(p[1]), "role": .string(role)]
                if let account = a.value("--unix-user") { req["unixUID"] = .int(Int64(try uid(of: account))) }
                return req
            },
            describe: { r in
                if let uid = r["unixUID"]?.int {
                    return """
                        added \(r["role"]?.string ?? "") \(r["member"]?.string ?? "") to family \(r["family"]?.string ?? ""), \
                        bound to the account with uid \(uid): its programs connect with --member \(r["member"]?.string ?? "") and no token
                        """
                }
                return """
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
            words: ["token", "rotate"], arguments: ["MEMBER"], extraFlags: ["--credentials"],
            summary: "Issue a new token for a member; the old one stops working at once.",
            notes:
                "--credentials FILE writes the member's id and new token to FILE (mode 0600) instead of printing the token;"
                + " FILE is new, or holds this member's credentials.",
            examples: ["permission-relay token rotate alex", "permission-relay token rotate alex --credentials alex.json"],
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
            describe: { r in "communication limits \(r["enabled"]?.bool == true ? "on" : "off") for \(r["child"]?.string ?? "")" }),
        AdminCommand(
            words: ["status"], arguments: [], extraFlags: [],
            summary: "Show the running relay's counters.",
            notes: "connections and sessions are those of members: admin connections, this one included, are not counted.",
            examples: ["permission-relay status", "permission-relay status --json"],
            request: { _, _ in ["type": "status"] },
            describe: { r in
                r.fields.flatMap { f -> [String] in
                    guard let inner = f.value.object else { return ["\(f.key): \(f.value.string ?? f.value.text)"] }
                    return inner.fields.map { field in
                        let none = field.key == "lastContact" ? "never" : "unknown"  // the inbox, while out of reach
                        return "\(f.key) \(field.key): \(field.value.string ?? (field.value == .null ? none : field.value.text))"
                    }
                }.joined(separator: "\n")
            }),
    ]
}

/// A group of admin commands (`member add`, `member remove`, …): its help lists them.
struct CommandGroup: Sendable {
    let word: String
    let summary: String

    static let all: [CommandGroup] = [
        CommandGroup(word: "family", summary: "Create families, and see who is in them."),
        CommandGroup(word: "member", summary: "Add children and guardians to families, and remove them."),
        CommandGroup(word: "token", summary: "Issue members new tokens."),
        CommandGroup(word: "limits", summary: "Turn children's communication limits on or off."),
    ]

    var commands: [AdminCommand] { AdminCommand.all.filter { $0.words.count > 1 && $0.words[0] == word } }

    var usage: String {
        """
        OVERVIEW: \(summary)

        USAGE: permission-relay \(word) <command> [options]

        COMMANDS:
        \(commands.map { "  \($0.synopsis.dropFirst(word.count + 1))\n      \($0.summary)" }.joined(separator: "\n"))

        Run `permission-relay \(word) <command> --help` for a command's options.

        EXAMPLES:
        \(commands.flatMap(\.examples).map { "  " + $0 }.joined(separator: "\n"))
        """
    }

    /// Why the words after the group's name name none of its commands.
    func unknown(_ rest: [String]) -> CLIError {
        let names = commands.map { $0.words[1] }
        guard let first = rest.first, !first.hasPrefix("-") else {
            return .usage("\(word) needs a command: \(names.joined(separator: " or "))")
        }
        return .usage("unknown command \"\(word) \(first)\" (\(word) commands: \(names.joined(separator: ", ")))")
    }
}

extension JSONObject {
    var encodedText: String { String(decoding: encoded, as: UTF8.self) }
}

/// Families as `family list` prints them: each family's id, then a line per member.
func describeFamilies(_ families: [JSON]) -> String {
    guard !families.isEmpty else { return "no families yet (create one: permission-relay family create FAMILY)" }
    func plural(_ n: Int64, _ word: String) -> String { "\(n) \(word)\(n == 1 ? "" : "s")" }
    return families.compactMap(\.object).map { f in
        let members = f["members"]?.array?.compactMap(\.object) ?? []
        let width = members.map { ($0["member"]?.string ?? "").count }.max() ?? 0
        let lines = members.map { m in
            let id = m["member"]?.string ?? ""
            let role = m["role"]?.string ?? ""
            var facts: [String] = []
            if let on = m["limitsEnabled"]?.bool { facts.append("limits \(on ? "on" : "off")") }
            if let n = m["pendingQuestions"]?.int { facts.append(plural(n, "pending question")) }
            let connections = m["connections"]?.int ?? 0
            facts.append(connections == 0 ? "not connected" : plural(connections, "connection"))
            if let uid = m["unixUID"]?.int { facts.append("bound to uid \(uid)") }
            func padded(_ s: String, _ n: Int) -> String { s + String(repeating: " ", count: max(0, n - s.count)) }
            return "  \(padded(id, width))  \(padded(role, 8))  \(facts.joined(separator: ", "))"
        }
        let name = f["family"]?.string ?? ""
        return ([members.isEmpty ? "\(name) (no members)" : name] + lines).joined(separator: "\n")
    }.joined(separator: "\n")
}

/// The uid of a Unix account given by name or number.
func uid(of account: String) throws -> UInt32 {
    if let n = UInt32(account) { return n }
    guard let entry = getpwnam(account) else {
        throw CLIError.failure("no Unix account \(account) on this machine (--unix-user takes an account name or a uid)")
    }
    return entry.pointee.pw_uid
}

/// A member's credentials file, readable by this user only, written whole or not at all:
/// a temporary file made before the request, renamed into place once the token is known.
struct CredentialsFile {
    let path: String
    private let temporary: String
    private let fd: Int32

    /// `replacing`: the member whose own credentials a file already at `path` may hold, to
    /// be replaced (a token rotated); any other file there is kept, and this refused.
    init(path: String, replacing member: String?) throws {
        self.path = path
        var st = stat()
        if lstat(path, &st) == 0 {
            let held = (try? String(contentsOfFile: path, encoding: .utf8)).flatMap { try? JSON.parse($0)["member"]?.string }
            guard let member, held == member else {
                throw CLIError.failure(
                    "\(path) exists\(held.map { " and holds \($0)'s credentials" } ?? ""): give a new file to --credentials,"
                        + " or remove that one if it is not needed")
            }
        }
        temporary = path + ".tmp-\(getpid())"
        fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw CLIError.failure("cannot write the credentials to \(path): \(String(cString: strerror(errno)))") }
    }

    func write(_ credentials: JSONObject) throws {
        let bytes = Array((credentials.encodedText + "\n").utf8)
        let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count, fsync(fd) == 0, rename(temporary, path) == 0 else {
            throw CLIError.failure("cannot write the credentials to \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// Closes the file, and removes the temporary one if it was not put in place.
    func discard() {
        close(fd)
        unlink(temporary)
    }
}
