import CLISupport
import XCTest

final class ArgumentsTests: XCTestCase {
    func testEverythingAfterADoubleDashIsAPositional() throws {
        // A member id may begin with dashes: `--` lets it be given.
        let a = try Arguments(["fam", "--role", "child", "--", "--kid", "--json"], valueFlags: ["--role"], switchFlags: ["--json"])
        XCTAssertEqual(a.positionals, ["fam", "--kid", "--json"])
        XCTAssertEqual(a.value("--role"), "child")
        XCTAssertFalse(a.has("--json"))
    }

    func testAnOptionBeforeADoubleDashIsStillChecked() {
        XCTAssertThrowsError(try Arguments(["--nope", "--", "x"], valueFlags: [], switchFlags: [])) { error in
            guard case CLIError.usage(let message) = error else { return XCTFail("\(error)") }
            XCTAssertEqual(message, "unknown option --nope")
        }
    }

    func testAMistypedOptionIsShownTheOneMeant() {
        for (typed, said) in [
            ("--wiat", "unknown option --wiat (did you mean --wait?)"), ("--timeot", "unknown option --timeot (did you mean --timeout?)"),
            ("--json", "unknown option --json"),
        ] {
            XCTAssertThrowsError(try Arguments([typed], valueFlags: ["--timeout"], switchFlags: ["--wait"])) { error in
                guard case CLIError.usage(let message) = error else { return XCTFail("\(error)") }
                XCTAssertEqual(message, said)
            }
        }
    }

    func testTheFirstPositionalMayComeAfterADoubleDash() {
        let flags: Set<String> = ["--socket"]
        XCTAssertEqual(Arguments.firstPositional(in: ["--socket", "s", "ask", "x"], valueFlags: flags), 2)
        XCTAssertEqual(Arguments.firstPositional(in: ["--socket", "s", "--", "--x"], valueFlags: flags), 3)
        XCTAssertNil(Arguments.firstPositional(in: ["--json", "--"], valueFlags: flags))
    }
}
