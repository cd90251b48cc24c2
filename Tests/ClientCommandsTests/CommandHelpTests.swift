import ClientCommands
import XCTest

final class CommandHelpTests: XCTestCase {
    let usage = """
        OVERVIEW: A tool.

        USAGE: tool <command> [options]

        COMMANDS:
          ask HANDLE...        Ask
              --wait             Wait for it
          ask-update --description TEXT   Ask after an update
          auto --approve|--decline
                               A bot
          list                 List

        OPTIONS:
          --socket PATH        The socket

        EXIT STATUS:
          0 success, 64 usage error

        EXAMPLES:
          export TOOL_CREDENTIALS=~/a.json
          tool ask +1555 --wait
          tool ask-update --description "v2"
          tool auto --approve
        """

    func testACommandsHelpHasItsEntryTheSharedSectionsAndItsOwnExamples() throws {
        let ask = try XCTUnwrap(CommandHelp.text(for: "ask", in: usage, program: "tool"))
        // The whole help's OPTIONS and EXIT STATUS, as they stand there.
        let shared = try XCTUnwrap(
            usage.range(of: "OPTIONS:").map { String(usage[$0.lowerBound...]) }?.components(separatedBy: "\n\nEXAMPLES:").first)
        XCTAssertEqual(
            ask,
            """
            USAGE: tool ask HANDLE... [options]

            ask HANDLE...        Ask
                --wait             Wait for it

            \(shared)

            EXAMPLES:
              export TOOL_CREDENTIALS=~/a.json
              tool ask +1555 --wait
            """)
        let auto = try XCTUnwrap(CommandHelp.text(for: "auto", in: usage, program: "tool"))
        XCTAssertTrue(auto.hasPrefix("USAGE: tool auto --approve|--decline [options]\n\nauto --approve|--decline\n"), auto)
        XCTAssertTrue(auto.contains("A bot"))
        XCTAssertFalse(auto.contains("list"), "the next entry is not part of it")
    }

    func testACommandWithoutExamplesHasNoExamplesSection() throws {
        let list = try XCTUnwrap(CommandHelp.text(for: "list", in: usage, program: "tool"))
        XCTAssertFalse(list.contains("EXAMPLES:"), list)
        XCTAssertFalse(list.contains("export"), list)
    }

    func testUnknownCommandsHaveNone() {
        XCTAssertNil(CommandHelp.text(for: "fly", in: usage, program: "tool"))
        XCTAssertNil(CommandHelp.text(for: "--wait", in: usage, program: "tool"), "an option's line is no entry")
    }

    func testWhatHelpIsRequested() {
        func help(_ args: [String]) -> String? { CommandHelp.requested(by: args, usage: usage, program: "tool") }
        XCTAssertNil(help(["ask", "+1555"]))
        XCTAssertEqual(help(["--help"]), usage)
        XCTAssertEqual(help(["help"]), usage)
        XCTAssertEqual(help(["fly", "-h"]), usage, "a command without an entry gets the whole help")
        XCTAssertEqual(help(["ask", "--help"]), CommandHelp.text(for: "ask", in: usage, program: "tool"))
        XCTAssertEqual(help(["help", "ask-update"]), CommandHelp.text(for: "ask-update", in: usage, program: "tool"))
        XCTAssertEqual(help(["--json", "--help", "list"]), CommandHelp.text(for: "list", in: usage, program: "tool"))
        XCTAssertNil(help(["ask", "--", "--help"]), "after --, a positional")
    }
}
