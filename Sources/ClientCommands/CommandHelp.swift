// One command's help, cut from a client program's whole help: that command's entry, the
// options every command takes, the exit statuses and the examples that run it. The whole
// help stays the one place each command is described.

/// The help `PROGRAM COMMAND --help` prints.
public enum CommandHelp {
    /// The help `args` ask for with `--help`, `-h` or `help`: one command's (`ask --help`,
    /// `help ask`), else the whole of `usage`; nil when they ask for none.
    public static func requested(by args: [String], usage: String, program: String) -> String? {
        let options = args.prefix { $0 != "--" }  // after `--`, `--help` is a positional
        guard options.contains("--help") || options.contains("-h") || args.first == "help" else { return nil }
        let command = (args.first == "help" ? args.dropFirst() : args[...]).first { !$0.hasPrefix("-") }
        return command.flatMap { text(for: $0, in: usage, program: program) } ?? usage
    }

    /// The help for `command`, taken from `usage` (a program's whole help: sections headed
    /// `COMMANDS:`, `OPTIONS:`, `EXIT STATUS:`, `EXAMPLES:`, entries under `COMMANDS:`
    /// indented by two spaces, their further lines by more); nil when no entry names it.
    public static func text(for command: String, in usage: String, program: String) -> String? {
        let sections = Self.sections(usage)
        guard let entry = Self.entry(command, in: sections["COMMANDS"] ?? []), let first = entry.first else { return nil }
        // The synopsis is the entry's first column: up to the first gap of two spaces or more.
        let synopsis = first.dropFirst(2).components(separatedBy: "  ")[0]
        var out = ["USAGE: \(program) \(synopsis) [options]", ""]
        out += entry.map { String($0.dropFirst(2)) }
        for (header, name) in [("OPTIONS:", "OPTIONS"), ("EXIT STATUS:", "EXIT STATUS")] {
            guard let lines = sections[name] else { continue }
            out += ["", header] + lines
        }
        // Examples of this command, after the lines that set up every one (`export …`).
        let examples = (sections["EXAMPLES"] ?? []).filter { line in
            let words = line.split(separator: " ").map(String.init)
            return words.first == "export" || (words.count >= 2 && words[0] == program && words[1] == command)
        }
        if examples.contains(where: { !$0.hasPrefix("  export") }) {
            out += ["", "EXAMPLES:"] + examples
        }
        return out.joined(separator: "\n")
    }

    /// The lines under each header (`NAME:` at the start of a line), blank lines at their
    /// ends dropped.
    private static func sections(_ usage: String) -> [String: [String]] {
        var sections: [String: [String]] = [:]
        var current: String?
        for line in usage.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if let first = line.first, first.isUppercase, let colon = line.firstIndex(of: ":"),
                line[..<colon].allSatisfy({ $0.isUppercase || $0 == " " })
            {
                current = String(line[..<colon])
                sections[current!] = []
            } else if let name = current {
                sections[name]!.append(line)
            }
        }
        return sections.mapValues { lines in
            var lines = lines
            while lines.last?.allSatisfy(\.isWhitespace) == true { lines.removeLast() }
            return lines
        }
    }

    /// `command`'s lines under `COMMANDS:`: the line naming it, then those indented further.
    private static func entry(_ command: String, in lines: [String]) -> [String]? {
        func isEntry(_ line: String) -> Bool { line.hasPrefix("  ") && !line.hasPrefix("   ") }
        guard
            let start = lines.firstIndex(where: {
                isEntry($0) && $0.dropFirst(2).split(separator: " ", maxSplits: 1).first.map(String.init) == command
            })
        else { return nil }
        let end = lines[(start + 1)...].firstIndex(where: { isEntry($0) || $0.isEmpty }) ?? lines.endIndex
        return Array(lines[start..<end])
    }
}
