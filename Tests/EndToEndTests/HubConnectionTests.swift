// The hub link against a real nats-server with JetStream: deduplicated publishes, the
// first decision on a subject winning, durable consumers that hand again what was not
// acknowledged, and nothing acknowledged lost when the hub is killed.

import Foundation
import RelayHub
import XCTest

final class HubConnectionTests: XCTestCase {
    private let stream = HubStream(name: "FAM_smiths", subjects: ["fam.smiths.>"])

    private func connected(_ server: NATSServer) throws -> HubConnection {
        let hub = try HubConnection(url: server.url, name: "test", timeoutMillis: 2000)
        try hub.ensureStream(stream)
        return hub
    }

    func testAResendOfAnIdIsADuplicateAndNothingNew() throws {
        let server = try NATSServer()
        let hub = try connected(server)
        try hub.ensureStream(stream)  // a second time: the stream is there already
        let subject = "fam.smiths.m.alex.req.Q1"
        XCTAssertEqual(try hub.publish(subject, id: "Q1#1", body: Array("ask".utf8)), .stored(1))
        XCTAssertEqual(try hub.publish(subject, id: "Q1#1", body: Array("ask".utf8)), .duplicate(1), "the same id again")
        XCTAssertEqual(try hub.publish(subject, id: "Q1#2", body: Array("ask again".utf8)), .stored(2), "another id")
    }

    func testOnlyTheFirstDecisionOnASubjectIsStored() throws {
        let server = try NATSServer()
        let hub = try connected(server)
        let subject = "fam.smiths.m.alex.dec.Q1"
        XCTAssertNil(try hub.lastMessage(stream: stream.name, subject: subject))
        let first = try hub.publish(
            subject, id: "sam-approve", body: Array("approve".utf8), headers: ["Member": "sam"], firstOnSubject: true)
        XCTAssertEqual(first, .stored(1))
        XCTAssertEqual(
            try hub.publish(subject, id: "kim-decline", body: Array("decline".utf8), firstOnSubject: true), .notFirst,
            "a second guardian's answer loses")
        XCTAssertEqual(
            try hub.publish(subject, id: "sam-approve", body: Array("approve".utf8), firstOnSubject: true), .duplicate(1),
            "the winner's resend is told it was stored")
        let last = try XCTUnwrap(try hub.lastMessage(stream: stream.name, subject: subject))
        XCTAssertEqual(last.body, Array("approve".utf8))
        XCTAssertEqual(last.header("Member"), "sam")
        XCTAssertEqual(last.header("Nats-Msg-Id"), "sam-approve")
    }

    func testAConsumerHandsAgainWhatWasNotAcknowledged() throws {
        let server = try NATSServer()
        let hub = try connected(server)
        for n in 1...3 { _ = try hub.publish("fam.smiths.m.alex.req.Q\(n)", id: "Q\(n)", body: [UInt8(n)]) }
        do {
            let received = Received()
            let subscription = try hub.subscribe(
                stream: stream.name, durable: "dev-sam-laptop", filter: "fam.smiths.>", redeliverAfterMillis: 300, onMessage: received.add)
            let batch = received.take(3, within: 5)
            XCTAssertEqual(batch.map(\.body), [[1], [2], [3]])
            XCTAssertEqual(batch.map(\.deliveries), [1, 1, 1])
            XCTAssertEqual(batch.map(\.streamSequence), [1, 2, 3])
            XCTAssertEqual(try subscription.consumer()?.waiting, 3, "handed, none acknowledged yet")
            XCTAssertEqual(try subscription.consumer()?.bound, true)
            for m in batch.prefix(2) { try m.ack() }
            _ = subscription
        }  // the third is never acknowledged: the device went away while storing it
        let received = Received()
        let again = try hub.subscribe(
            stream: stream.name, durable: "dev-sam-laptop", filter: "fam.smiths.>", redeliverAfterMillis: 300, onMessage: received.add)
        let redelivered = received.take(1, within: 5)
        XCTAssertEqual(redelivered.map(\.body), [[3]], "only what was not acknowledged comes again")
        XCTAssertEqual(redelivered.first?.deliveries, 2)
        try redelivered.first?.ack()
        XCTAssertEqual(received.take(1, within: 0.6).count, 0, "acknowledged, it comes no more")
        // An acknowledgement is sent without waiting: the hub counts it a moment later.
        let deadline = Date().addingTimeInterval(5)
        while try again.consumer()?.waiting != 0 && Date() < deadline { usleep(20_000) }
        XCTAssertEqual(try again.consumer()?.waiting, 0, "nothing waits for this device")
    }

    func testWhatTheHubAcknowledgedOutlivesItsKillAndTheLinkComesBack() throws {
        let server = try NATSServer()
        let hub = try connected(server)
        for n in 1...50 {
            XCTAssertEqual(try hub.publish("fam.smiths.m.alex.req.Q\(n)", id: "Q\(n)", body: [UInt8(n)]), .stored(UInt64(n)))
        }
        server.kill()
        XCTAssertThrowsError(try hub.publish("fam.smiths.m.alex.req.Q51", id: "Q51", body: [51])) { error in
            XCTAssertTrue((error as? HubError)?.isUnreachable == true, "\(error)")
        }
        try server.start()
        // The link comes back by itself. The failed try may have been kept by the client
        // and sent once the link was back: its resend then finds it stored (the id).
        var result: Published?
        for _ in 0..<100 where result == nil {
            result = try? hub.publish("fam.smiths.m.alex.req.Q51", id: "Q51", body: [51])
        }
        XCTAssertTrue([.stored(51), .duplicate(51)].contains(result), "\(String(describing: result))")
        let received = Received()
        let subscription = try hub.subscribe(
            stream: stream.name, durable: "dev-kim-desktop", filter: "fam.smiths.>", onMessage: received.add)
        XCTAssertEqual(received.take(52, within: 2).map(\.body), (1...51).map { [UInt8($0)] }, "every acknowledged publish, in order, once")
        _ = subscription
    }

    func testABatchSentWithoutWaitingIsStoredInOrderWithEachOutcome() throws {
        let server = try NATSServer()
        let hub = try connected(server)
        let decision = "fam.smiths.m.alex.dec.Q1"
        let results = hub.publish([
            HubPublication(subject: "fam.smiths.m.alex.req.Q1", id: "Q1", body: [1], firstOnSubject: false),
            HubPublication(subject: decision, id: "sam-approve", body: [2], firstOnSubject: true),
            HubPublication(subject: decision, id: "kim-decline", body: [3], firstOnSubject: true),
            HubPublication(subject: "fam.smiths.m.alex.req.Q2", id: "Q2", body: [4], firstOnSubject: false),
        ])
        XCTAssertEqual(try results.map { try $0.get() }, [.stored(1), .stored(2), .notFirst, .stored(3)])
        let again = hub.publish([HubPublication(subject: "fam.smiths.m.alex.req.Q2", id: "Q2", body: [4], firstOnSubject: false)])
        XCTAssertEqual(try again.first?.get(), .duplicate(3))

        server.kill()
        let unanswered = hub.publish(
            (5...7).map { HubPublication(subject: "fam.smiths.m.alex.req.Q\($0)", id: "Q\($0)", body: [UInt8($0)], firstOnSubject: false) })
        XCTAssertEqual(unanswered.count, 3)
        for r in unanswered {
            guard case .failure(let error) = r else { return XCTFail("stored by a hub that was killed: \(r)") }
            XCTAssertTrue(error.isUnreachable, "\(error)")
        }
    }

    /// libnats calls a connection's link callbacks on a thread of its own, also after the
    /// connection is destroyed: none may then reach what the connection was told to call.
    func testNoLinkChangeCallbackRunsAfterTheConnectionIsGone() throws {
        let server = try NATSServer()
        final class Probe: @unchecked Sendable {
            let lock = NSLock()
            var gone = false
            var afterGone = 0
            func hit() { lock.withLock { if gone { afterGone += 1 } } }
        }
        var probes: [Probe] = []
        for _ in 0..<20 {
            let probe = Probe()
            probes.append(probe)
            do {
                let c = try HubConnection(url: server.url, name: "t", timeoutMillis: 2000, onLinkChange: { [probe] in probe.hit() })
                XCTAssertTrue(c.isConnected)
            }  // destroyed here: libnats queues its DISCONNECTED and CLOSED callbacks
            probe.lock.withLock { probe.gone = true }
        }
        // Nothing to wait for but libnats' callback thread, which has no event of its own.
        usleep(500_000)
        XCTAssertEqual(probes.reduce(0) { sum, p in sum + p.lock.withLock { p.afterGone } }, 0)
    }

    func testAPasswordInTheHubsAddressIsNeverShown() throws {
        XCTAssertEqual(HubConnection.redacted("nats://relay:s3cret@hub.home.arpa:4222"), "nats://…@hub.home.arpa:4222")
        XCTAssertEqual(HubConnection.redacted("nats://hub.home.arpa:4222"), "nats://hub.home.arpa:4222")
        XCTAssertEqual(HubConnection.redacted("nats://u:p/q@h1:4222,nats://u:p@h2:4222"), "nats://…@h1:4222,nats://…@h2:4222")
        XCTAssertThrowsError(try HubConnection(url: "nats://relay:s3cret@127.0.0.1:1", name: "test", timeoutMillis: 300)) { error in
            XCTAssertFalse("\(error)".contains("s3cret"), "\(error)")
        }
    }

    func testAHubNobodyListensAtIsAClearError() throws {
        let server = try NATSServer()
        let url = server.url
        server.kill()
        XCTAssertThrowsError(try HubConnection(url: url, name: "test", timeoutMillis: 500)) { error in
            XCTAssertTrue("\(error)".hasPrefix("cannot connect to the hub at \(url)"), "\(error)")
        }
    }
}
