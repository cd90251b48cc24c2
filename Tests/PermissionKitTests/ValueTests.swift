import Foundation
import RelayProtocol
import Synchronization
import XCTest

@testable import PermissionKit

final class ValueTests: XCTestCase {
    func testEveryRelayErrorCodeMapsToAnAskError() {
        let expected: [String: AskError] = [
            "communicationLimitsNotEnabled": .communicationLimitsNotEnabled, "contactSyncNotSetup": .contactSyncNotSetup,
            "invalidQuestion": .invalidQuestion, "badRequest": .invalidQuestion, "forbidden": .notAvailable,
            "tooManyPending": .notAvailable, "rateLimited": .notAvailable, "busy": .notAvailable,
        ]
        for code in ErrorCode.allCases.map(\.rawValue) {
            let e = AskError(code: code, message: "m")
            if let want = expected[code] {
                XCTAssertEqual(e, want, code)
            } else {
                XCTAssertEqual(e, .systemError(underlyingError: ClientError.relay(code: code, message: "m")), code)
            }
        }
        XCTAssertEqual(AskError(code: "somethingNew", message: ""), .unknown, "an unknown code never crashes")
        XCTAssertEqual(Set<AskError>([.notAvailable, .notAvailable, .invalidQuestion]).count, 2, "hashed as compared: by case")
        // Said in full where an app logs `localizedDescription`.
        XCTAssertEqual(RelayError(code: "notFound", message: "no such question").localizedDescription, "notFound: no such question")
        XCTAssertEqual(ClientError.unauthorized("wrong token").localizedDescription, "the relay refused the credentials: wrong token")
    }

    func testQuestionDefaultsAndWireRoundTrip() throws {
        var q = PermissionQuestion<CommunicationTopic>(
            communicationTopic: CommunicationTopic(
                personInformation: [
                    .init(
                        handle: .init(value: "+1 555 0100", kind: .phoneNumber),
                        nameComponents: PersonNameComponents(givenName: "Kim", familyName: "Lee"), avatarImage: Data([1, 2, 3]))
                ], actions: [.message, .videoCall]))
        XCTAssertEqual(q.choices, [.approve, .decline])
        XCTAssertEqual(q.defaultChoice, .decline, "the most restrictive choice by default")
        q.expirationDate = Date(timeIntervalSince1970: 2_000_000_000)
        let wire = try XCTUnwrap(q.wire)
        let content = try QuestionContent.validate(wire.object!, now: Timestamp(milliseconds: 0))
        XCTAssertEqual(content.id, q.id.uuidString)
        let back = try XCTUnwrap(PermissionQuestion<CommunicationTopic>(wire: wire))
        XCTAssertEqual(back.topic, q.topic)
        XCTAssertEqual(back.expirationDate, q.expirationDate)
        XCTAssertNil(PermissionQuestion<SignificantAppUpdateTopic>(wire: wire), "a question of another topic type")

        let custom = PermissionQuestion(
            topic: SignificantAppUpdateTopic(description: "v2"),
            choices: [
                .init(id: "week", title: "For a week", answer: .approval, durationSeconds: 604800),
                .init(id: "no", title: "No", answer: .denial),
            ])
        XCTAssertEqual(custom.defaultChoice.id, "no")
        XCTAssertNoThrow(try QuestionContent.validate(custom.wire!.object!, now: Timestamp(milliseconds: 0)))
    }

    func testAnExpirationDateOutOfRangeIsRefusedNotATrap() throws {
        var q = PermissionQuestion(topic: SignificantAppUpdateTopic(description: "v2"))
        q.expirationDate = Date(timeIntervalSince1970: 1e300)
        let wire = try XCTUnwrap(q.wire?.object)
        XCTAssertEqual(wire["expirationDate"]?.string, Timestamp(milliseconds: .max).rfc3339)
        XCTAssertThrowsError(try QuestionContent.validate(wire, now: Timestamp(milliseconds: 0)), "not a timestamp the relay reads")
        XCTAssertEqual(Date(timeIntervalSince1970: -1e300).rfc3339, Timestamp(milliseconds: .min).rfc3339)
        XCTAssertEqual(Date(timeIntervalSince1970: 1.5).rfc3339, "1970-01-01T00:00:01.500Z")
    }

    /// A credentials file that cannot be used says why: missing, a directory, or not the shape.
    func testCredentialsThatCannotBeReadSayWhy() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("credentials-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        func why(_ path: String) -> String? {
            do {
                _ = try RelayConfiguration.readCredentials(path)
                return nil
            } catch {
                return "\(error)"
            }
        }
        let good = dir.appendingPathComponent("good.json").path
        try Data(#"{"member":"alex","token":"t0k","family":"smiths"}"#.utf8).write(to: URL(fileURLWithPath: good))
        XCTAssertNil(why(good))
        XCTAssertEqual(try RelayConfiguration.readCredentials(good).member, "alex")
        let missing = dir.appendingPathComponent("missing.json").path
        XCTAssertEqual(why(missing), "cannot read credentials from \(missing): no such file")
        XCTAssertEqual(why(dir.path), "cannot read credentials from \(dir.path): it is a directory")
        let shapeless = dir.appendingPathComponent("shapeless.json").path
        try Data(#"{"member":"alex"}"#.utf8).write(to: URL(fileURLWithPath: shapeless))
        XCTAssertEqual(why(shapeless), #"cannot read credentials from \#(shapeless): expected {"member": …, "token": …}"#)
        let empty = dir.appendingPathComponent("empty.json").path
        XCTAssertTrue(FileManager.default.createFile(atPath: empty, contents: Data()))
        XCTAssertEqual(why(empty), "cannot read credentials from \(empty): it is empty")
    }

    func testEventProgressIsContiguousAndSurvivesARestart() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("progress-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let p = EventProgress(path: path)
        p.welcome(head: 9, cursor: 4, gap: false)
        for seq: Int64 in 5...7 { p.received(seq) }  // in order, as a connection delivers them
        XCTAssertEqual(p.markDone(5), 5)
        XCTAssertNil(p.markDone(7), "7 is done but 6 is not: the mark stays")
        XCTAssertTrue(p.isDone(7))
        XCTAssertFalse(p.isDone(6))
        let again = EventProgress(path: path)
        XCTAssertEqual(again.mark, 5)
        XCTAssertTrue(again.isDone(7))
        XCTAssertEqual(again.markDone(6), 7)
        again.welcome(head: 3, cursor: 1, gap: false)  // a relay that lost its data: start over at its cursor
        XCTAssertEqual(again.mark, 1)
        XCTAssertFalse(again.isDone(2))
    }

    func testTopicsGrowOnceAndTheSubscriptionIsQueuedUnderTheLock() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("progress-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let p = EventProgress(path: path)
        let queued = Mutex<[Set<String>]>([])
        // Two threads registering at once: exactly one sees the set grow, and whatever it
        // queues is there before either register returns.
        DispatchQueue.concurrentPerform(iterations: 2) { _ in
            p.register(["communication"]) { all in queued.withLock { $0.append(all) } }
            XCTAssertEqual(queued.withLock { $0 }, [["communication"]], "queued before any register returned")
        }
        var sent = queued.withLock { $0 }
        p.register(["communication", "significantAppUpdate"]) { sent.append($0) }
        p.register(["significantAppUpdate"]) { sent.append($0) }
        XCTAssertEqual(sent, [["communication"], ["communication", "significantAppUpdate"]])
        XCTAssertEqual(EventProgress(path: path).topics, ["communication", "significantAppUpdate"], "kept for later runs")
    }

    /// Events marked done on the connection's thread while the app registers topics on
    /// another: the file ends as the state ends. (Snapshots written outside the lock could
    /// land out of order, the last one written an older mark: a restarted app was shown a
    /// response again.)
    func testTheStateFileEndsAsTheStateWhateverThreadsWriteIt() throws {
        for round in 0..<50 {
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("progress-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: path) }
            let p = EventProgress(path: path)
            p.welcome(head: 0, cursor: 0, gap: false)
            DispatchQueue.concurrentPerform(iterations: 2) { side in
                for n in 1...50 {
                    if side == 0 { p.markDone(Int64(n)) } else { p.register(["topic\(n)"]) { _ in } }
                }
            }
            let reloaded = EventProgress(path: path)
            XCTAssertEqual(reloaded.mark, 50, "round \(round)")
            XCTAssertEqual(reloaded.topics.count, 50, "round \(round)")
        }
    }

    func testTheDefaultSessionNameIsOneTheRelayTakes() throws {
        let valid = try NSRegularExpression(pattern: "^[A-Za-z0-9._-]{1,64}$")
        let long = String(repeating: "m", count: 64)
        let cases: [(member: String, host: String, app: String, session: String)] = [
            ("kim", "Jürgens-MacBook.local", "permission-child", "kim-Jrgens-MacBook.local-permission-child"),
            ("kim", "ホスト", "my_app", "kim-my_app"),
            ("kim", "", "", "kim-app"),
            ("kim", "tablet٣", "Chat Ünïcode", "kim-tablet-Chatncode"),
            (long, "host", "permission-guardian-watch", String(long.prefix(38)) + "-permission-guardian-watch"),
        ]
        for c in cases {
            let session = RelayConfiguration.defaultSession(member: c.member, app: c.app, host: c.host)
            XCTAssertEqual(session, c.session)
            XCTAssertEqual(valid.numberOfMatches(in: session, range: NSRange(session.startIndex..., in: session)), 1, session)
        }
        XCTAssertNotEqual(
            RelayConfiguration.defaultSession(member: "sam", app: "permission-guardian", host: "h"),
            RelayConfiguration.defaultSession(member: "sam", app: "permission-guardian-watch", host: "h"),
            "each program has a session of its own")
    }

    /// A first run under the per-app session name starts where the shared session of earlier
    /// versions was, so that nothing that came meanwhile is skipped.
    func testTheFirstRunOfAnAppStartsWhereTheSharedSessionWas() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("legacy-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let legacy = dir + "/alex.alex-tablet.state"
        try Data(#"{"seq":41,"above":[],"topics":["communication"]}"#.utf8).write(to: URL(fileURLWithPath: legacy))
        let mine = dir + "/alex.alex-tablet-chat.state"
        RelayConfiguration.takeOverLegacyState(member: "alex", into: mine, in: dir, host: "tablet")
        XCTAssertEqual(EventProgress(path: mine).mark, 41)
        XCTAssertEqual(EventProgress(path: mine).topics, ["communication"])
        try Data(#"{"seq":50}"#.utf8).write(to: URL(fileURLWithPath: mine))
        RelayConfiguration.takeOverLegacyState(member: "alex", into: mine, in: dir, host: "tablet")
        XCTAssertEqual(EventProgress(path: mine).mark, 50, "only a first run takes the old place")
    }

    /// Without credentials the configuration says at once what is missing and where it is read from.
    func testMissingCredentialsSayWhatIsMissing() {
        for (env, missing) in [
            ([:], "neither PERMISSION_CREDENTIALS nor PERMISSION_MEMBER is set"),
            (["PERMISSION_TOKEN": "t"], "PERMISSION_TOKEN is set, PERMISSION_MEMBER is not"),
        ] {
            XCTAssertThrowsError(try RelayConfiguration.fromEnvironment(env, app: "x")) { error in
                guard case .systemError(let e) = error as? AskError else { return XCTFail("\(error)") }
                XCTAssertTrue("\(e)".hasPrefix("no credentials (\(missing)): set PERMISSION_CREDENTIALS"), "\(e)")
            }
        }
        let c = try? RelayConfiguration.fromEnvironment(["PERMISSION_MEMBER": "alex", "PERMISSION_TOKEN": "t"], app: "chat")
        XCTAssertEqual(c?.session?.hasSuffix("-chat"), true)
        let account = try? RelayConfiguration.fromEnvironment(["PERMISSION_MEMBER": "alex"], app: "chat")
        XCTAssertEqual(account?.token, "", "a member alone: the one bound to this Unix account")
    }

    func testHandleNormalization() {
        XCTAssertEqual(CommunicationHandle(value: "+1 (555) 0100", kind: .phoneNumber).normalized?.value, "+15550100")
        XCTAssertNil(CommunicationHandle(value: "nobody", kind: .emailAddress).normalized)
    }
}
