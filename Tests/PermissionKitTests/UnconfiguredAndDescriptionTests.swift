// A center without credentials fails at once and says why; the public types print readably.

import Foundation
import XCTest

@testable import PermissionKit

final class UnconfiguredAndDescriptionTests: XCTestCase {
    /// Without credentials every request fails at once, saying what is missing and where it
    /// is read from, and every stream ends instead of waiting forever.
    func testACenterWithoutCredentialsFailsAtOnceAndItsStreamsEnd() async throws {
        let child = AskCenter(environment: [:])
        let started = ContinuousClock.now
        do {
            try await child.ask(PermissionQuestion(handle: CommunicationHandle(value: "+15550100", kind: .phoneNumber)))
            XCTFail("there are no credentials")
        } catch AskError.systemError(let e as ClientError) {
            guard case .missingCredentials = e else { return XCTFail("\(e)") }
            XCTAssertTrue(e.description.contains("set PERMISSION_CREDENTIALS"), e.description)
        }
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(1))
        guard case .missingCredentials? = child.connectionError else { return XCTFail("\(String(describing: child.connectionError))") }
        for await _ in child.responses(for: CommunicationTopic.self) {}
        for await _ in child.outcomes() {}

        let guardian = GuardianCenter(configuration: nil)
        for await _ in guardian.questions() {}
        for await _ in guardian.closedQuestions() {}
        do {
            _ = try await guardian.pending()
            XCTFail("there is no configuration")
        } catch AskError.systemError(let e as ClientError) {
            XCTAssertEqual(e.description.hasPrefix("no credentials (no configuration was given)"), true, e.description)
        }
    }

    private struct PlaydateTopic: QuestionTopic {
        static let id = "playdate"
    }

    /// A question the library can tell is invalid says why through `lastError`.
    func testAQuestionInvalidBeforeItIsSentSaysWhy() async throws {
        let child = AskCenter(environment: ["PERMISSION_MEMBER": "c0", "PERMISSION_TOKEN": "t", "PERMISSION_RELAY_SOCKET": "/nonexistent"])
        do {
            try await child.ask(PermissionQuestion(topic: PlaydateTopic()))
            XCTFail("a topic the relay does not take")
        } catch let e as AskError {
            XCTAssertEqual(e, .invalidQuestion)
            XCTAssertTrue(child.lastError?.description.contains("not PlaydateTopic") ?? false, "\(String(describing: child.lastError))")
        }
        await child.close()
    }

    func testThePublicTypesPrintReadably() {
        let kim = CommunicationHandle(value: "+15550199", kind: .phoneNumber)
        XCTAssertEqual("\(kim)", "phone:+15550199")
        XCTAssertEqual("\(CommunicationHandle(value: "kim@example.org", kind: .emailAddress))", "email:kim@example.org")
        let person = CommunicationTopic.PersonInformation(
            handle: kim, nameComponents: PersonNameComponents(givenName: "Kim", familyName: "Lee"))
        let topic = CommunicationTopic(personInformation: [person], actions: [.message, .audioCall])
        XCTAssertEqual("\(topic)", "audioCall, message with Kim Lee (phone:+15550199)")
        let hour = PermissionChoice(id: "hour", title: "For an hour", answer: .approval, durationSeconds: 3600)
        XCTAssertEqual("\(hour)", #"hour "For an hour" (approval for 3600 s)"#)
        let id = UUID()
        let q = PermissionQuestion(id: id, topic: topic)
        XCTAssertEqual("\(q)", "question \(id): audioCall, message with Kim Lee (phone:+15550199); choices approve, decline")
        XCTAssertEqual(
            "\(QuestionOutcome(questionID: id, reason: .expired, defaultChoice: .decline))",
            "question \(id) expired (default choice: decline)")
        XCTAssertFalse("\(kim)".contains("PermissionKit."), "no module-qualified dump")
    }
}
