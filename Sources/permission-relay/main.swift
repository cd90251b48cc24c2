// permission-relay: the daemon (`serve`) and the admin commands that talk to it.

import CLISupport
import Foundation

let overview = """
    OVERVIEW: The permission relay: children ask, guardians answer, nothing is lost.

    USAGE: permission-relay <command> [options]

    COMMANDS:
      serve                                   Run the relay daemon
      family create FAMILY                    Create a family
      family list|show [FAMILY]               List the families and their members
      member add FAMILY MEMBER --role ROLE    Add a child or guardian; prints its token once
      member remove MEMBER                    Remove a member
      token rotate MEMBER                     Issue a new token for a member
      limits set CHILD on|off                 Turn a child's communication limits on or off
      status                                  Show the running relay's counters
      backup DEST                             Copy the store into one file while the relay runs
      restore BACKUP                          Put a backup in place (the relay stopped)
      check                                   Check the store for damage
      hub init [DIR]                          Make a family hub's keys and configuration
      device key|add|join|remove|list         Pair devices with their family on the hub

    Run `permission-relay <command> --help` for a command's options (`member --help`
    lists the member commands), and `permission-relay --version` for the version.

    EXAMPLES:
      permission-relay serve
      permission-relay family create smiths
      permission-relay member add smiths alex --role child
    """

let args = Array(CommandLine.arguments.dropFirst())
/// The command the arguments name; `help member add` names the one `member add --help` does.
let named = args.first == "help" ? Array(args.dropFirst()) : args
let admin = AdminCommand.all.first { Array(named.prefix($0.words.count)) == $0.words }
let storeCommand = StoreCommand.all.first { $0.name == named.first }
let hubCommand = HubCommand.all.first { Array(named.prefix($0.words.count)) == $0.words }
/// A group of commands named without one of them (`member`, `member --help`).
let group = admin == nil ? CommandGroup.all.first { $0.word == named.first } : nil
/// The usage of the command being run, shown with --help.
let usage =
    named.first == "serve"
    ? Serve.usage
    : admin?.usage ?? storeCommand?.usage ?? hubCommand?.usage ?? group?.usage ?? named.first.flatMap(HubCommand.groupUsage)
        ?? overview

exit(
    runMain(program: "permission-relay") {
        guard let first = args.first else {
            throw CLIError.usage("no command given: serve, family, member, token, limits, status, backup, restore, check, hub or device")
        }
        let options = args.prefix { $0 != "--" }  // after `--`, `--help` is a positional
        if options.contains("-h") || options.contains("--help") || first == "help" {
            printOut(usage)
            return 0
        }
        // A command's wrong arguments point to its own help, which lists its options.
        func withItsHelp(_ words: [String], _ run: () throws -> Void) throws {
            do { try run() } catch CLIError.usage(let message) {
                throw CLIError.commandUsage(message, command: words.joined(separator: " "))
            }
        }
        if first == "serve" {
            try withItsHelp(["serve"]) { try Serve.run(Array(args.dropFirst())) }
        } else if let storeCommand {
            try withItsHelp([storeCommand.name]) { try storeCommand.run(Array(args.dropFirst())) }
        } else if let hubCommand {
            try withItsHelp(hubCommand.words) { try hubCommand.run(Array(args.dropFirst(hubCommand.words.count))) }
        } else if let admin {
            try withItsHelp(admin.words) { try admin.run(Array(args.dropFirst(admin.words.count))) }
        } else if let group {
            throw group.unknown(Array(args.dropFirst()))
        } else if first == "hub" || first == "device" {
            throw HubCommand.unknown(first, Array(args.dropFirst()))
        } else {
            let words = ["serve", "status", "backup", "restore", "check", "hub", "device"] + CommandGroup.all.map(\.word)
            throw CLIError.usage("unknown command \"\(args.prefix(2).joined(separator: " "))\"\(didYouMean(first, among: words))")
        }
        return 0
    })
