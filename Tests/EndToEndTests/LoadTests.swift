// Many connections at once, descriptor hygiene, and a barrage of random frames.

import Foundation
import RelayProtocol
import XCTest

final class LoadTests: XCTestCase {
    func test500ConcurrentConnectionsEachCompleteACycle() throws {
        let relay = try RelayProcess()
        try relay.start()
        let families = 250
        let tokens = try relay.provision(families: families)
        var children: [Client] = []
        var guardians: [Client] = []
        for i in 0..<families {
            let c = try relay.connect()
            _ = try c.hello("c\(i)", tokens["c\(i)"]!)
            XCTAssertEqual(try c.request(["type": "subscribe", "topics": ["communication"]])["type"]?.string, "ok")
            children.append(c)
            let g = try relay.connect()
            _ = try g.hello("g\(i)", tokens["g\(i)"]!)
            guardians.append(g)
        }
        let status = try relay.admin().request(["type": "status"])
        XCTAssertGreaterThanOrEqual(status["connections"]?.int ?? 0, 500)
        for c in children { try c.send(["type": "ask", "id": "a", "question": question()]) }
        for g in guardians {
            let q = try g.event("question")
            try g.send(["type": "answer", "id": "x", "questionId": q["question"]!["id"]!, "choice": "approve"])
        }
        for (i, c) in children.enumerated() {
            XCTAssertEqual(try c.reply("a")["type"]?.string, "ok")
            XCTAssertEqual(try c.event("response")["guardian"]?.string, "g\(i)")
        }
        for g in guardians { XCTAssertEqual(try g.reply("x")["status"]?.string, "answered") }
    }

    func testNoDescriptorLeaks() throws {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let warm = try relay.connect()
        _ = try warm.hello("c0", tokens["c0"]!)
        let before = relay.openDescriptors()
        for i in 0..<200 {
            let c = try relay.connect()
            switch i % 4 {
            case 0: _ = try c.hello("c0", tokens["c0"]!, session: "s\(i % 8)")
            case 1: try c.c.sendRaw([0, 0, 0, 0])
            case 2: try c.c.sendRaw(framed(Array("garbage".utf8)))
            default: _ = try c.hello("g0", tokens["g0"]!)
            }
        }
        // The relay notices every close within a turn or two; status is a round trip behind them.
        var after = Int.max
        for _ in 0..<50 where after != before {
            _ = try warm.request(["type": "limits"])
            after = relay.openDescriptors()
        }
        XCTAssertEqual(after, before)
    }

    func testRandomAndMutatedFramesNeverHurtTheRelay() throws {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        var rng = SystemRandomNumberGenerator()
        let templates: [JSONObject] = [
            ["type": "ask", "id": "1", "question": question()],
            ["type": "answer", "id": "2", "questionId": "x", "choice": "approve"],
            ["type": "hello", "id": "3", "protocol": 1, "member": "c0", "token": "t"],
            ["type": "subscribe", "id": "4", "topics": ["communication"]],
            ["type": "ack", "seq": 3],
            ["type": "knownHandles", "id": "5", "handles": [.object(["value": "+1", "kind": "phoneNumber"])]],
            ["type": "history", "id": "6", "limit": 5],
            ["type": "setLimits", "id": "7", "child": "c0", "enabled": true],
        ]
        var sent = 0
        for round in 0..<20 {
            let c = try relay.connect()
            if round % 2 == 0 { _ = try c.hello(round % 4 == 0 ? "c0" : "g0", tokens[round % 4 == 0 ? "c0" : "g0"]!) }
            for _ in 0..<250 {
                var body = templates.randomElement(using: &rng)!.encoded
                for _ in 0..<Int.random(in: 0...4, using: &rng) where !body.isEmpty {
                    let i = Int.random(in: 0..<body.count, using: &rng)
                    switch Int.random(in: 0..<4, using: &rng) {
                    case 0: body[i] = UInt8.random(in: 0...255, using: &rng)
                    case 1: body.remove(at: i)
                    case 2: body.insert(Array("{}[]\":,0-".utf8).randomElement(using: &rng)!, at: i)
                    default: body = Array(body[..<i])
                    }
                }
                if body.isEmpty { body = [0x20] }
                do { try c.c.sendRaw(framed(body)) } catch { break }
                sent += 1
            }
        }
        XCTAssertGreaterThan(sent, 2000)
        // Still serving a full cycle.
        let child = try relay.connect()
        _ = try child.hello("c0", tokens["c0"]!)
        _ = try child.request(["type": "subscribe", "topics": ["communication"]])
        let g = try relay.connect()
        _ = try g.hello("g0", tokens["g0"]!)
        let id = UUID().uuidString
        XCTAssertEqual(try child.request(["type": "ask", "question": question(id)])["type"]?.string, "ok")
        XCTAssertEqual(try g.request(["type": "answer", "questionId": .string(id), "choice": "approve"])["type"]?.string, "ok")
        XCTAssertEqual(try child.event("response")["question"]?["id"]?.string, id)
        XCTAssertEqual(relay.terminate(), 0)
    }
}
