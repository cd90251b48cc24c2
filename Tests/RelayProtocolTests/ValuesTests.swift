import Foundation
import RelayProtocol
import XCTest

final class ValuesTests: XCTestCase {
    /// The default socket is not used where another user could have put a relay of their own.
    /// XDG directories and HOME count only as absolute paths (the XDG specification's
    /// rule): relative or empty ones would put state wherever the program runs, or under /.
    func testOnlyAbsoluteXDGDirectoriesAndHomesCount() {
        XCTAssertEqual(
            RelayDefaults.baseDirectory("XDG_STATE_HOME", else: ".local/state", environment: ["XDG_STATE_HOME": "/s", "HOME": "/h"]), "/s")
        XCTAssertEqual(
            RelayDefaults.baseDirectory("XDG_STATE_HOME", else: ".local/state", environment: ["XDG_STATE_HOME": "s", "HOME": "/h"]),
            "/h/.local/state")
        XCTAssertEqual(RelayDefaults.baseDirectory("XDG_CONFIG_HOME", else: ".config", environment: ["HOME": "/h"]), "/h/.config")
        let account = String(cString: getpwuid(getuid())!.pointee.pw_dir)
        for home in ["", "relative/home"] {
            XCTAssertEqual(RelayDefaults.homeDirectory(environment: ["HOME": home]), account, "HOME=\(home)")
        }
        XCTAssertEqual(RelayDefaults.socketPath(environment: ["XDG_RUNTIME_DIR": "run"]), "/tmp/permission-relay-\(getuid())/relay.sock")
        XCTAssertEqual(RelayDefaults.socketPath(environment: ["XDG_RUNTIME_DIR": "/run/user/7"]), "/run/user/7/permission-relay/relay.sock")
    }

    func testADefaultSocketInADirectoryOthersControlIsNotTrusted() throws {
        let run = FileManager.default.temporaryDirectory.appendingPathComponent("trust-\(UUID().uuidString)").path
        let dir = run + "/permission-relay"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: run) }
        let env = ["XDG_RUNTIME_DIR": run]
        chmod(dir, 0o700)
        XCTAssertNil(RelayDefaults.distrust(dir + "/relay.sock", environment: env))
        chmod(dir, 0o777)
        XCTAssertNotNil(RelayDefaults.distrust(dir + "/relay.sock", environment: env))
        XCTAssertNil(RelayDefaults.distrust(dir + "/other.sock", environment: env), "a socket named on purpose is the user's choice")
        if geteuid() == 0 {
            chmod(dir, 0o700)
            chown(dir, 65534, 65534)
            XCTAssertNotNil(RelayDefaults.distrust(dir + "/relay.sock", environment: env), "another user's directory")
        }
    }

    /// A client finds this user's relay, else the machine's (the family computer's), unless told.
    func testAClientFindsTheMachinesRelayWhenItsUserRunsNone() {
        let env = ["XDG_RUNTIME_DIR": "/run/user/1001"]
        let mine = "/run/user/1001/permission-relay/relay.sock", machine = RelayDefaults.machineSocketPath
        XCTAssertEqual(
            RelayDefaults.clientSocketPath(environment: env) { _ in false }, mine, "nothing listens: say where this user's would")
        XCTAssertEqual(RelayDefaults.clientSocketPath(environment: env) { $0 == machine }, machine)
        XCTAssertEqual(RelayDefaults.clientSocketPath(environment: env) { _ in true }, mine, "this user's first")
        XCTAssertEqual(
            RelayDefaults.clientSocketPath(environment: env.merging(["PERMISSION_RELAY_SOCKET": "/x.sock"]) { $1 }) { $0 == machine },
            "/x.sock")
    }

    func testTimestamps() {
        let t = Timestamp(rfc3339: "2026-12-01T18:00:00Z")!
        XCTAssertEqual(t.rfc3339, "2026-12-01T18:00:00Z")
        XCTAssertEqual(Timestamp(rfc3339: "2026-12-01T19:30:00+01:30"), t)
        XCTAssertEqual(Timestamp(rfc3339: "2026-12-01T18:00:00.25Z")?.rfc3339, "2026-12-01T18:00:00.250Z")
        XCTAssertEqual(Timestamp(rfc3339: "1970-01-01T00:00:00Z")?.milliseconds, 0)
        XCTAssertEqual(Timestamp(rfc3339: "2024-02-29T00:00:00Z")?.rfc3339, "2024-02-29T00:00:00Z")
        XCTAssertEqual(Timestamp(rfc3339: "9999-12-31T23:59:59.999Z"), Timestamp.latest)
        XCTAssertEqual(Timestamp(rfc3339: "0000-01-01T00:00:00Z"), Timestamp.earliest)
        XCTAssertEqual(Timestamp.earliest.rfc3339, "0000-01-01T00:00:00Z")
        for bad in [
            "2026-02-30T00:00:00Z", "2026-12-01 18:00", "2026-12-01T18:00:00", "2026-13-01T00:00:00Z", "x", "2026-12-01T18:00:00.Z",
            "9999-12-31T23:59:59-00:01", "0000-01-01T00:00:00+00:01",  // years of five digits, or below 0, in UTC
        ] {
            XCTAssertNil(Timestamp(rfc3339: bad), bad)
        }
        var rng = SplitMix(seed: 7)
        for _ in 0..<1000 {
            let ms = Int64(rng.next() % 4_000_000_000_000)
            let s = Timestamp(milliseconds: ms).rfc3339
            XCTAssertEqual(Timestamp(rfc3339: s)?.milliseconds, ms, s)
        }
    }

    func testAddingSecondsStopsAtTheEndsOfTheRange() {
        let t = Timestamp(rfc3339: "2026-12-01T18:00:00Z")!
        XCTAssertEqual(t.adding(seconds: 90).rfc3339, "2026-12-01T18:01:30Z")
        XCTAssertEqual(t.adding(seconds: -90).rfc3339, "2026-12-01T17:58:30Z")
        for s in [Int64.max, Int64.max / 500, Int64.max / 1000] { XCTAssertEqual(t.adding(seconds: s).milliseconds, .max, "\(s)") }
        for s in [Int64.min, Int64.min / 500] { XCTAssertEqual(t.adding(seconds: s).milliseconds, .min, "\(s)") }
    }

    func testTimestampFormattingAgreesWithFoundation() {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
        var rng = SplitMix(seed: 11)
        // From 1600 (Foundation's calendar turns Julian before 1582) to 9999.
        let first: Int64 = -11_676_096_000_000, last: Int64 = 253_402_300_799_999
        for k in 0..<2000 {
            var ms = first + Int64(rng.next() % UInt64(last - first))
            if k % 2 == 0 { ms -= ms % 1000 }  // whole seconds are written without a fraction
            var expected = f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
            if ms % 1000 == 0 { expected = expected.replacingOccurrences(of: ".000Z", with: "Z") }
            XCTAssertEqual(Timestamp(milliseconds: ms).rfc3339, expected, "\(ms)")
        }
        XCTAssertEqual(Timestamp(milliseconds: 253_402_300_800_000).rfc3339, "10000-01-01T00:00:00Z")
        XCTAssertEqual(Timestamp(milliseconds: -62_198_755_200_000).rfc3339, "-0001-01-01T00:00:00Z")
        // The ends of the range (a time limit that saturates is Int64.max).
        XCTAssertEqual(Timestamp(milliseconds: .max).rfc3339, "292278994-08-17T07:12:55.807Z")
        XCTAssertEqual(Timestamp(milliseconds: .min).rfc3339, "-292275055-05-16T16:47:04.192Z")
        XCTAssertEqual(Timestamp(milliseconds: (1 << 53) + 1).rfc3339, "287396-10-12T08:59:00.993Z")
    }

    func testHandleNormalization() {
        XCTAssertEqual(NormalizedHandle(kind: .phoneNumber, rawValue: " +1 (234) 567-890")?.value, "+1234567890")
        XCTAssertEqual(NormalizedHandle(kind: .phoneNumber, rawValue: "1234567890")?.value, "1234567890")
        XCTAssertNil(NormalizedHandle(kind: .phoneNumber, rawValue: "+()-"))
        XCTAssertNil(NormalizedHandle(kind: .phoneNumber, rawValue: ""))
        XCTAssertEqual(
            NormalizedHandle(kind: .phoneNumber, rawValue: "+1 234 567 890 123 456 789 0")?.value, "+12345678901234567890")
        // A "+" counts only first, after any whitespace, Unicode's included.
        XCTAssertEqual(NormalizedHandle(kind: .phoneNumber, rawValue: "\t\u{00A0}\u{2003}+44 20")?.value, "+4420")
        XCTAssertEqual(NormalizedHandle(kind: .phoneNumber, rawValue: "\u{00A0}44 20")?.value, "4420")
        XCTAssertEqual(NormalizedHandle(kind: .phoneNumber, rawValue: "44+20")?.value, "4420")
        XCTAssertEqual(NormalizedHandle(kind: .phoneNumber, rawValue: "(+44) 20")?.value, "4420")
        XCTAssertEqual(NormalizedHandle(kind: .emailAddress, rawValue: "  Kim@Example.ORG ")?.value, "kim@example.org")
        XCTAssertNil(NormalizedHandle(kind: .emailAddress, rawValue: "kim"))
        XCTAssertEqual(NormalizedHandle(kind: .custom, rawValue: " Kim ")?.value, " Kim ")
        XCTAssertNil(NormalizedHandle(kind: .custom, rawValue: ""))
        // Exactly: canonically equivalent text is not the same handle.
        let composed = NormalizedHandle(kind: .custom, rawValue: "Caf\u{E9}"),
            decomposed = NormalizedHandle(kind: .custom, rawValue: "Cafe\u{301}")
        XCTAssertNotEqual(composed, decomposed)
        XCTAssertEqual(Set([composed, decomposed, NormalizedHandle(kind: .custom, rawValue: "Caf\u{E9}")]).count, 2)
        XCTAssertNotEqual(NormalizedHandle(kind: .custom, rawValue: "a@b"), NormalizedHandle(kind: .emailAddress, rawValue: "a@b"))
    }

    func testIdentifiers() {
        XCTAssertEqual(QuestionID("6f9619ff-8b86-d011-b42d-00cf4fc964ff")?.description, "6F9619FF-8B86-D011-B42D-00CF4FC964FF")
        XCTAssertNil(QuestionID("6f9619ff8b86d011b42d00cf4fc964ff"))
        XCTAssertNil(QuestionID("6f9619ff-8b86-d011-b42d-00cf4fc964fg"))
        // Every position, every other byte: only hex digits where digits go and dashes where
        // dashes go make a UUID.
        let good = Array("6f9619FF-8b86-D011-b42d-00cf4fc964ff".utf8)
        let hexDigits = Set("0123456789abcdefABCDEF".utf8)
        for i in good.indices {
            for c in UInt8.min...UInt8.max where c != good[i] {
                var u = good
                u[i] = c
                let isDash = [8, 13, 18, 23].contains(i)
                let valid = !isDash && hexDigits.contains(c)
                XCTAssertEqual(u.withUnsafeBufferPointer(QuestionID.init(utf8:)) != nil, valid, "byte \(c) at \(i)")
            }
        }
        for _ in 0..<1000 {
            let u = UUID().uuidString
            XCTAssertEqual(QuestionID(u.lowercased())?.description, u)
            XCTAssertEqual(QuestionID(u.lowercased()), QuestionID(u))
            XCTAssertEqual(QuestionID(u.lowercased())?.withCanonicalBytes { Array($0) }, Array(u.utf8))
        }
        XCTAssertNotEqual(
            QuestionID("00000000-0000-0000-0000-000000000001"), QuestionID("00000000-0000-0001-0000-000000000000"),
            "the two halves are kept apart")
        for bad in [
            "", "6f9619ff-8b86-d011-b42d-00cf4fc964f", "6f9619ff-8b86-d011-b42d-00cf4fc964fff", "6f9619ff8-b86-d011-b42d-00cf4fc964ff",
        ] {
            XCTAssertNil(QuestionID(bad), bad)
        }
        XCTAssertTrue(Identifier.isValid("alex-tablet_2.0"))
        XCTAssertFalse(Identifier.isValid(""))
        XCTAssertFalse(Identifier.isValid("a b"))
        XCTAssertFalse(Identifier.isValid(String(repeating: "a", count: 65)))
    }

    /// protocol.md's error-code table and the ErrorCode catalogue list the same codes.
    func testProtocolDocumentListsEveryErrorCode() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let doc = try String(contentsOf: root.appendingPathComponent("protocol.md"), encoding: .utf8)
        guard let start = doc.range(of: "## Error codes") else { return XCTFail("protocol.md has no '## Error codes' section") }
        let section = doc[start.upperBound...].prefix { _ in true }.components(separatedBy: "\n## ").first ?? ""
        let documented = Set(
            section.split(separator: "\n").compactMap { line -> String? in
                guard line.hasPrefix("| `") else { return nil }
                return line.dropFirst(3).split(separator: "`").first.map(String.init)
            })
        XCTAssertEqual(documented, Set(ErrorCode.allCases.map(\.rawValue)))
    }
}
