// A response is recorded as processed (acknowledged, and written to the state file)
// only once the app has had it: when its loop asks for the next one, or ends. The
// relay is played by the test.

import Foundation
@testable import PermissionKit
import RelayProtocol
import XCTest

final class DeliveryToAppTests: XCTestCase {
    private func response(_ seq: Int64) -> JSONObject {
        let question: JSONObject = [
            "id": .string(UUID().uuidString), "child": "c0", "createdAt": "2026-12-01T10:00:00Z", "status": "answered", "attempt": 1,
            "topic": .object([
                "kind": "communication",
                "personInformation": [.object(["handle": .object(["value": "+15550100", "kind": "phoneNumber"])])],
                "actions": ["message"],
            ]),
            "choices": [
                .object(["id": "approve", "title": "Approve", "answer": "approval"]),
                .object(["id": "decline", "title": "Decline", "answer": "denial"]),
            ],
            "defaultChoice": "decline",
        ]
        return [
            "type": "response", "seq": .int(seq), "question": .object(question),
            "choice": .object(["id": "approve", "title": "Approve", "answer": "approval"]), "guardian": "g0",
            "answeredAt": "2026-12-01T10:00:01Z",
        ]
    }

    /// The acks the client sends within `limit`, skipping its other frames (its subscription).
    private func acks(_ relay: ScriptedRelay, within limit: Duration) -> [Int64] {
        var seen: [Int64] = []
        while let (frame, _) = relay.nextFrame(within: limit) {
            if frame["type"]?.string == "ack", let seq = frame["seq"]?.int { seen.append(seq) }
        }
        return seen
    }

    func testAResponseIsProcessedOnlyOnceTheLoopAsksForTheNextOrEnds() async throws {
        let relay = try ScriptedRelay()
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("app-\(UUID().uuidString).state").path
        defer { try? FileManager.default.removeItem(atPath: state) }
        var config = RelayConfiguration(socketPath: relay.path, member: "c0", token: "t", session: "app", stateFile: state)
        config.ackDelay = .zero
        let center = AskCenter(configuration: config)
        try relay.acceptAndWelcome()
        do {
            var responses = center.responses(for: CommunicationTopic.self).makeAsyncIterator()
            relay.send(response(1))
            let first = await responses.next()
            XCTAssertEqual(first?.guardian, "g0")
            XCTAssertEqual(acks(relay, within: .milliseconds(300)), [], "handed to the app, not yet processed")
            XCTAssertNil(EventProgress(path: state).mark.flatMap { $0 >= 1 ? $0 : nil }, "an app stopped now is shown it again")

            relay.send(response(2))
            _ = await responses.next()
            XCTAssertEqual(acks(relay, within: .seconds(2)), [1], "asking for the next says the first is done")
            XCTAssertEqual(EventProgress(path: state).mark, 1)
        }  // the loop ends: the last one it had is done too
        XCTAssertEqual(acks(relay, within: .seconds(2)), [2])
        XCTAssertEqual(EventProgress(path: state).mark, 2)
        await center.close()
    }
}
