// When the client acknowledges events: with the next request it sends, on its own once
// the ack delay has passed, and at once when it closes. The relay is played by the test,
// which sees every frame the client writes and when it came.

import CSystem
import Foundation
import Glibc
@testable import PermissionKit
import RelayProtocol
import XCTest

final class AckTests: XCTestCase {
    /// A client connection whose events the test acknowledges, as an app does once it has
    /// processed them, and the relay it talks to.
    private func connect(ackDelay: Duration) async throws -> (RelayConnection, ScriptedRelay) {
        let relay = try ScriptedRelay()
        var config = RelayConfiguration(socketPath: relay.path, member: "c0", token: "t", session: "app")
        config.ackDelay = ackDelay
        let connection = RelayConnection(config: config, resumePoint: { nil }, setup: { [] }, onEvent: { _ in })
        connection.start()
        try relay.acceptAndWelcome()
        addTeardownBlock { connection.close() }
        for await state in connection.states() where state == .ready { break }  // past the welcome
        return (connection, relay)
    }

    func testAnAckWithNothingToCarryItGoesAloneOnceItsDelayHasPassed() async throws {
        let (connection, relay) = try await connect(ackDelay: .milliseconds(300))
        let processed = ContinuousClock.now
        connection.ack(1)
        connection.ack(2)
        let (frame, at) = try XCTUnwrap(relay.nextFrame(within: .seconds(10)), "the ack never came")
        XCTAssertEqual(frame["type"]?.string, "ack")
        XCTAssertEqual(frame["seq"]?.int, 2, "one ack for both events")
        XCTAssertGreaterThanOrEqual(at - processed, .milliseconds(300), "held back for its delay")
    }

    func testAnAckRidesWithTheNextRequest() async throws {
        let (connection, relay) = try await connect(ackDelay: .seconds(30))
        connection.ack(5)
        async let reply = connection.request(["type": "questions"])
        let (request, _) = try XCTUnwrap(relay.nextFrame(within: .seconds(10)))
        XCTAssertEqual(request["type"]?.string, "questions")
        let (ack, _) = try XCTUnwrap(
            relay.nextFrame(within: .seconds(10)), "the ack did not come with the request, long before its delay of 30 s")
        XCTAssertEqual(ack["type"]?.string, "ack")
        XCTAssertEqual(ack["seq"]?.int, 5)
        relay.send(["type": "ok", "re": .string(request["id"]?.string ?? "")])
        _ = try await reply
    }

    func testClosingSendsAHeldAckAtOnce() async throws {
        let (connection, relay) = try await connect(ackDelay: .seconds(30))
        connection.ack(7)
        connection.close()
        let (frame, _) = try XCTUnwrap(relay.nextFrame(within: .seconds(10)), "closing did not send the ack held for 30 s")
        XCTAssertEqual(frame["type"]?.string, "ack")
        XCTAssertEqual(frame["seq"]?.int, 7)
    }

    func testWithNoDelayEveryAckGoesAtOnce() async throws {
        let (connection, relay) = try await connect(ackDelay: .zero)
        for seq in 1...3 {
            connection.ack(Int64(seq))
            let (frame, _) = try XCTUnwrap(relay.nextFrame(within: .seconds(10)), "ack \(seq) never came")
            XCTAssertEqual(frame["type"]?.string, "ack")
            XCTAssertEqual(frame["seq"]?.int, Int64(seq))
        }
    }
}

/// A relay played by a test: it welcomes one client, then hands over each frame the
/// client writes, with when it was read, and sends what it is told to.
final class ScriptedRelay: @unchecked Sendable {
    let path: String
    private let directory: URL
    private let listenFD: Int32
    private var fd: Int32 = -1
    private var decoder = FrameDecoder()
    private var read: [JSONObject] = []

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("scripted-relay-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        path = directory.appendingPathComponent("relay.sock").path
        listenFD = cs_listen_unix(path, 4)
        guard listenFD >= 0 else { throw CocoaError(.fileWriteUnknown) }
    }

    deinit {
        if fd >= 0 { Glibc.close(fd) }
        Glibc.close(listenFD)
        try? FileManager.default.removeItem(at: directory)
    }

    /// Takes the client's (next) connection and answers its hello with a welcome; returns the hello.
    @discardableResult
    func acceptAndWelcome(head: Int64 = 0, cursor: Int64 = 0) throws -> JSONObject {
        drop()
        var p = pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0)
        guard poll(&p, 1, 10_000) > 0 else { throw CocoaError(.fileReadUnknown) }
        fd = cs_accept(listenFD)
        guard fd >= 0, let (hello, _) = nextFrame(within: .seconds(10)), hello["type"]?.string == "hello" else {
            throw CocoaError(.fileReadUnknown)
        }
        send([
            "type": "welcome", "re": hello["id"] ?? .null, "member": "c0", "role": "child", "family": "f", "head": .int(head),
            "heartbeatSeconds": 15, "maxFrameBytes": 1_048_576, "session": "app", "cursor": .int(cursor),
        ])
        return hello
    }

    /// Closes the client's connection, as a relay that stops does.
    func drop() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
        decoder = FrameDecoder()
        read = []
    }

    func send(_ frame: JSONObject) {
        let bytes = frame.frame
        _ = bytes.withUnsafeBytes { cs_send(fd, $0.baseAddress, $0.count) }
    }

    /// The client's next frame and when it was read, or nil if none comes within `limit`.
    func nextFrame(within limit: Duration) -> (JSONObject, ContinuousClock.Instant)? {
        let deadline = ContinuousClock.now + limit
        while read.isEmpty {
            let left = deadline - .now
            guard left > .zero else { return nil }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, Int32(left / .milliseconds(1)) + 1) > 0 else { continue }
            var buf = [UInt8](repeating: 0, count: 65536)
            let n = buf.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { return nil }
            decoder.append(buf[0..<n])
            while case .frame(let body)? = decoder.next() {
                if let o = try? JSON.parse(body).object { read.append(o) }
            }
        }
        return (read.removeFirst(), .now)
    }
}

/// What a relay says as it gives up on a connection (an `error` that answers no request,
/// such as `busy` when it cannot store) is why the requests then fail.
final class ConnectionErrorTests: XCTestCase {
    /// A child's center on an ephemeral session, connected to a scripted relay.
    private func connect(_ configure: (inout RelayConfiguration) -> Void) throws -> (AskCenter, ScriptedRelay) {
        let relay = try ScriptedRelay()
        var config = RelayConfiguration(socketPath: relay.path, member: "c0", token: "t", session: nil)
        configure(&config)
        let center = AskCenter(configuration: config)
        addTeardownBlock { await center.close() }
        try relay.acceptAndWelcome()
        return (center, relay)
    }

    func testAnErrorTheRelaySaysUnaskedIsWhyARequestFails() async throws {
        let (center, relay) = try connect { $0.requestTimeout = .milliseconds(500) }
        let asking = Task { try await center.knownHandles(in: [CommunicationHandle(value: "+15550100", kind: .phoneNumber)]) }
        let (request, _) = try XCTUnwrap(relay.nextFrame(within: .seconds(10)))
        XCTAssertEqual(request["type"]?.string, "knownHandles")
        relay.send(["type": "error", "code": "busy", "message": "the relay is unable to store changes (out of disk space)"])
        do {
            _ = try await asking.value
            XCTFail("no reply came")
        } catch {
            XCTAssertEqual(error as? AskError, .notAvailable)
        }
        guard case .relay(let code, let message)? = center.lastError else { return XCTFail("\(String(describing: center.lastError))") }
        XCTAssertEqual(code, "busy")
        XCTAssertEqual(message, "the relay is unable to store changes (out of disk space)")
    }

    /// An ask sent on a connection that went before its reply came is sent again marked as
    /// a resend, which the relay never takes for asking a closed question anew.
    func testAnAskSentAgainAfterAReconnectSaysItIsAResend() async throws {
        let (center, relay) = try connect { $0.reconnectDelay = .milliseconds(10) }
        let asking = Task { try await center.ask(PermissionQuestion(handle: CommunicationHandle(value: "+15550100", kind: .phoneNumber))) }
        func nextAsk() throws -> JSONObject {
            while let (f, _) = relay.nextFrame(within: .seconds(10)) {
                if f["type"]?.string == "ask" { return f }  // after a subscription
            }
            throw CocoaError(.fileReadUnknown)
        }
        let first = try nextAsk()
        XCTAssertNil(first["resend"])
        relay.drop()
        try relay.acceptAndWelcome()
        let again = try nextAsk()
        XCTAssertEqual(again["resend"]?.bool, true)
        XCTAssertEqual(again["question"], first["question"])
        relay.send(["type": "ok", "re": again["id"] ?? .null, "questionId": first["question"]?["id"] ?? .null, "status": "cancelled"])
        try await asking.value
    }
}
