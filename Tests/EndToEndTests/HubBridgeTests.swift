// The bridge inside the relay against a real hub: a device removed while messages it read
// wait for their acknowledgement, then paired again, reads again; a hub that lost its
// store is given the family's stream again.

import Foundation
@testable import RelayHub
import RelayModel
@testable import RelayServer
import RelayStore
import XCTest

final class HubBridgeTests: XCTestCase {
    func testTheBridgeReadsAgainOnceADeviceIsPairedAgain() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bridge-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var made: HubKeys?
        let server = try NATSServer { port, store in
            made = try HubKeys.create(in: dir + "/keys", listen: "127.0.0.1:\(port)", storeDirectory: store.path)
            return dir + "/keys/hub.conf"
        }
        let keys = try XCTUnwrap(made)
        let admin = try HubConnection(url: server.url, name: "admin", credentials: keys.adminCredentials, timeoutMillis: 2000)
        func pair(_ device: String, _ seed: NKey) throws -> String {
            let names = HubFamilyNames(
                stream: HubNames.stream(family: "smiths"), subjects: HubNames.all(family: "smiths"),
                consumer: HubNames.consumer(device: device))
            let jwt = try keys.addDevice(device, publicKey: seed.publicKey, family: "smiths", names: names) { try admin.push(account: $0) }
            let path = dir + "/\(device).creds"
            try HubKeys.writePrivate(path, HubCredentials.text(jwt: jwt, seed: seed))
            return path
        }
        let tabletSeed = try NKey.generate(.user)
        let tabletCredentials = try pair("tablet", tabletSeed)
        let laptop = try HubConnection(
            url: server.url, name: "laptop", credentials: try pair("laptop", NKey.generate(.user)), timeoutMillis: 2000)
        try laptop.ensureStream(HubStream(name: HubNames.stream(family: "smiths"), subjects: [HubNames.all(family: "smiths")]))

        let bridge = try startTablet(url: server.url, credentials: tabletCredentials, store: dir + "/relay.db")
        defer { bridge.stop() }
        func next(_ body: [UInt8], within seconds: Double) -> HubMessage? {
            let deadline = Date().addingTimeInterval(seconds)
            while Date() < deadline {
                for case .message(let m) in bridge.take() where m.body == body { return m }
                usleep(20_000)
            }
            return nil
        }
        _ = try laptop.publish(HubNames.ask(family: "smiths", question: "Q1"), id: "Q1", body: [1])
        let first = try XCTUnwrap(next([1], within: 10))

        // Removed before the loop committed what it read; libnats gives up on the link.
        try keys.removeDevice("tablet", family: "smiths") { try admin.push(account: $0) }
        let deadline = Date().addingTimeInterval(10)
        while bridge.isConnected && Date() < deadline { usleep(50_000) }
        bridge.acknowledge([first])  // through a connection that is gone
        _ = try pair("tablet", tabletSeed)
        _ = try laptop.publish(HubNames.ask(family: "smiths", question: "Q2"), id: "Q2", body: [2])
        XCTAssertNotNil(next([2], within: 20), "paired again, the bridge reads again")
    }

    func testAHubThatLostItsStoreIsGivenTheStreamAgainAndRead() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bridge-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let server = try NATSServer()
        let bridge = try startTablet(url: server.url, credentials: nil, store: dir + "/relay.db")
        defer { bridge.stop() }
        let laptop = try HubConnection(url: server.url, name: "laptop", credentials: nil, timeoutMillis: 2000)
        /// Publishes an ask from the laptop (which never makes the stream) until the hub
        /// stores it, and returns whether the bridge then read it.
        func readsAsk(_ body: UInt8) -> Bool {
            let deadline = Date().addingTimeInterval(30)
            var stored = false
            while Date() < deadline {
                if !stored {
                    stored =
                        (try? laptop.publish(HubNames.ask(family: "smiths", question: "Q\(body)"), id: "Q\(body)", body: [body])) != nil
                }
                if stored, bridge.take().contains(where: { if case .message(let m) = $0 { m.body == [body] } else { false } }) {
                    return true
                }
                usleep(50_000)
            }
            return false
        }
        XCTAssertTrue(readsAsk(1), "the bridge made the stream and reads it")

        server.kill()
        try FileManager.default.removeItem(at: server.storeDirectory.appendingPathComponent("jetstream"))
        try server.start()
        XCTAssertTrue(readsAsk(2), "the hub lost its store: the bridge made the stream again and reads it")
    }

    /// The bridge of a device "tablet" whose store (at `store`) holds the family "smiths", started.
    private func startTablet(url: String, credentials: String?, store path: String) throws -> HubBridge {
        let store = try SQLiteStore(path: path)
        try store.commit([.family("smiths")])
        let bridge = try HubBridge(
            url: url, credentials: credentials, device: "tablet", families: ["smiths"], retentionSeconds: 0,
            outbox: try store.hubOutboxReader(), log: Log(level: .error) { _ in })
        bridge.start()
        return bridge
    }
}
