// permission-relay: the daemon (`serve`) and the admin commands that talk to it.

import CLISupport
import Foundation

let overview = """
    OVERVIEW: The permission relay: children ask, guardians answer, nothing is lost.

    USAGE: permission-relay <command> [options]

    COMMANDS:
      serve                                   Run the relay daemon
      family create FAMILY                    Create a family
      member add FAMILY MEMBER --role ROLE    Add a child or guardian; prints its token once
      member remove MEMBER                    Remove a member
      token rotate MEMBER                     Issue a new token for a member
      limits set CHILD on|off                 Turn a child's communication limits on or off
      status                                  Show the running relay's counters

    Run `permission-relay <command> --help` for a command's options.

    EXAMPLES:
      permission-relay serve
      permission-relay family create smiths
      permission-relay member add smiths alex --role child
    """

func main() -> Int32 {
    let args = Array(CommandLine.arguments.dropFirst())
    guard let first = args.first else {
        printErr(overview)
        return 64
    }
    if first == "-h" || first == "--help" || first == "help" {
        printOut(overview)
        return 0
    }
    var usage = overview
    do {
        if first == "serve" {
            usage = Serve.usage
            if args.contains("-h") || args.contains("--help") {
                printOut(usage)
                return 0
            }
            try Serve.run(Array(args.dropFirst()))
            return 0
        }
        guard let cmd = AdminCommand.all.first(where: { Array(args.prefix($0.words.count)) == $0.words }) else {
            throw CLIError.usage("unknown command \"\(args.prefix(2).joined(separator: " "))\"")
        }
        usage = cmd.usage
        if args.contains("-h") || args.contains("--help") {
            printOut(usage)
            return 0
        }
        try cmd.run(Array(args.dropFirst(cmd.words.count)))
        return 0
    } catch CLIError.usage(let message) {
        printErr("permission-relay: \(message)\n\n\(usage)")
        return 64
    } catch CLIError.failure(let message) {
        printErr("permission-relay: \(message)")
        return 1
    } catch {
        printErr("permission-relay: \(error)")
        return 1
    }
}

exit(main())
