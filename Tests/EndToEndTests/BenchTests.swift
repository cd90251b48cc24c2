// The benchmark runs end to end: every cycle completes against the relay and the
// baseline (speed itself is measured by scripts/bench.sh, not asserted here).

import Foundation
import RelayProtocol
import XCTest

final class BenchTests: XCTestCase {
    func testASmallGridPointCompletesEveryCycle() throws {
        let p = try ProgramRun(
            "permission-bench", ["--families", "3", "--window", "2", "--duration", "0.5", "--warmup", "0.1", "--json"], env: [:])
        let line = try JSON.parse(p.nextLine() ?? "")
        XCTAssertEqual(p.finish(), 0)
        for side in ["relay", "baseline"] {
            XCTAssertGreaterThan(line[side]?["cycles"]?.int ?? 0, 0, side)
            XCTAssertEqual(line[side]?["errors"]?.int, 0, side)
            XCTAssertEqual(line[side]?["lost"]?.int, 0, "\(side): every question answered, every response matched")
            XCTAssertNotNil(line[side]?["p99Micros"]?.number, side)
        }
        XCTAssertNotNil(line["ratio"]?.number)
    }
}

final class BenchExtrasTests: XCTestCase {
    func testIdleMemoryAndStartupFiguresAreProduced() throws {
        let idle = try ProgramRun("permission-bench", ["idle", "--connections", "200", "--json"], env: [:])
        let i = try JSON.parse(idle.nextLine() ?? "")
        XCTAssertEqual(idle.finish(), 0)
        XCTAssertEqual(i["connections"]?.int, 200)
        XCTAssertNotNil(i["relayBytesPerIdleConnection"]?.number)

        let startup = try ProgramRun("permission-bench", ["startup", "--events", "3000", "--pending", "300", "--json"], env: [:])
        let s = try JSON.parse(startup.nextLine() ?? "")
        XCTAssertEqual(startup.finish(), 0)
        XCTAssertGreaterThan(s["startupSeconds"]?.number ?? 0, 0)
    }
}
