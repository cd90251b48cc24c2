// Many connections at once, descriptor hygiene, and a barrage of random frames.

import Foundation
import RelayProtocol
import RelayServer
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

    /// An event for many connections of one member that do not read is not copied to each
    /// before any is dropped: past the member's limit on unsent bytes the rest go at once, so
    /// the relay's memory at its peak grows by about that limit, not by connections × event.
    func testAnEventForManyConnectionsThatDoNotReadIsNotCopiedPastTheMembersLimit() throws {
        let relay = try RelayProcess(flags: ["--ask-rate-limit", "0", "--max-member-output-bytes", "1048576"])
        try relay.start()
        let tokens = try relay.provision(families: 1)
        var idle: [Client] = []
        for _ in 0..<200 {
            let g = try relay.connect()
            _ = try g.hello("g0", tokens["g0"]!)
            idle.append(g)  // never read from again
        }
        func peakKiB() throws -> Int {
            let status = try String(contentsOfFile: "/proc/\(relay.pid)/status", encoding: .utf8)
            let line = try XCTUnwrap(status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") })
            return try XCTUnwrap(Int(line.split(separator: " ")[1]))
        }
        let before = try peakKiB()
        let person: JSON = .object([
            "handle": .object(["value": "+15550100", "kind": "phoneNumber"]),
            "avatarImage": .string(Data(repeating: 7, count: 256 << 10).base64EncodedString()),
        ])
        let q: JSON = .object([
            "id": .string(UUID().uuidString), "topic": .object(["kind": "communication", "personInformation": [person]]),
        ])
        let c = try relay.connect()
        _ = try c.hello("c0", tokens["c0"]!)
        // Its reply comes once the question event has gone to every guardian connection.
        XCTAssertEqual(try c.request(["type": "ask", "question": q])["type"]?.string, "ok")
        let grown = try peakKiB() - before
        XCTAssertLessThan(grown, 24 << 10, "KiB more at the peak; 200 copies of the event are \(200 * 350) KiB")
        withExtendedLifetime(idle) {}
    }

    /// Out of file descriptors, the relay tells each connection it cannot take `busy` and
    /// closes it, rather than leaving it waiting while the listening socket, ready for it,
    /// keeps the loop spinning; once connections close it takes new ones again.
    func testOutOfDescriptorsEachWaitingConnectionIsToldBusyAndNothingSpins() throws {
        let relay = try RelayProcess(openFileLimit: 40)
        try relay.start()
        var held: [BlockingConnection] = []
        for _ in 0..<60 { held.append(try BlockingConnection(path: relay.socket)) }
        var refused = 0
        for c in held.suffix(10) {
            c.setTimeout(seconds: 10)
            let f = try c.receive()
            XCTAssertEqual(f?["code"]?.string, "busy")
            XCTAssertTrue(f?["message"]?.string?.contains("out of file descriptors") ?? false)
            if f?["code"]?.string == "busy", try c.receive() == nil { refused += 1 }  // then closed
        }
        XCTAssertEqual(refused, 10)
        // Every connection has been dealt with; a relay spinning on the listening socket
        // would burn its core meanwhile.
        let before = relay.cpuSeconds()
        Thread.sleep(forTimeInterval: 0.5)
        XCTAssertLessThan(relay.cpuSeconds() - before, 0.2, "the loop spins while out of descriptors")
        held.removeAll()  // closes them
        let admin = try relay.admin()
        XCTAssertEqual(try admin.request(["type": "status"])["type"]?.string, "ok", "taking connections again")
        XCTAssertEqual(relay.terminate(), 0)
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

    /// Every part of every request, one at a time, replaced by a value of another kind —
    /// integers past 64 bits, fractions, huge exponents, strings, arrays, objects, null: each
    /// request still gets its one reply, in order, and the relay goes on serving.
    func testEveryPartOfEveryRequestReplacedByAnotherKindOfValueGetsItsReply() throws {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let child = try relay.connect()
        _ = try child.hello("c0", tokens["c0"]!, session: "tablet")
        let guardian = try relay.connect()
        _ = try guardian.hello("g0", tokens["g0"]!)
        let admin = try relay.admin()
        let asked = UUID().uuidString
        XCTAssertEqual(try child.request(["type": "ask", "question": question(asked)])["type"]?.string, "ok")
        let handles: JSON = [.object(["value": "+1 555 0100", "kind": "phoneNumber"])]
        var timed = question()
        if case .object(var q) = timed {
            q["choices"] = [
                .object(["id": "ok", "title": "OK", "answer": "approval", "durationSeconds": 60]),
                .object(["id": "no", "title": "No", "answer": "denial"]),
            ]
            q["defaultChoice"] = "no"
            q["expirationDate"] = "2099-01-01T00:00:00Z"
            timed = .object(q)
        }
        let requests: [(Client, JSONObject)] = [
            (child, ["type": "ask", "question": question()]),
            (child, ["type": "ask", "question": timed]),
            (child, ["type": "cancel", "questionId": .string(asked)]),
            (child, ["type": "questions", "status": "pending"]),
            (child, ["type": "knownHandles", "handles": handles]),
            (child, ["type": "subscribe", "topics": ["communication"]]),
            (child, ["type": "ack", "seq": 1]),
            (guardian, ["type": "answer", "questionId": .string(asked), "choice": "approve"]),
            (guardian, ["type": "pending", "child": "c0"]),
            (guardian, ["type": "setLimits", "child": "c0", "enabled": true]),
            (guardian, ["type": "addKnownHandles", "child": "c0", "handles": handles]),
            (guardian, ["type": "removeKnownHandles", "child": "c0", "handles": handles]),
            (guardian, ["type": "history", "child": "c0", "limit": 5]),
            (admin, ["type": "status"]),
            (admin, ["type": "createFamily", "family": "f9"]),
            (admin, ["type": "addMember", "family": "f9", "member": "m9", "role": "child"]),
            (admin, ["type": "rotateToken", "member": "nobody"]),
            (admin, ["type": "removeMember", "member": "nobody"]),
        ]
        // Written into the frame's text in place of one part, so numbers no JSON type of the
        // relay's can hold reach it as they are.
        let others = [
            "null", "true", "-1", "0", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
            "18446744073709551616", "1e400", "-1e400", "1.5", "-0.0", "\"\"", "\"\\u0000\"", "\"9223372036854775808\"",
            "\"\(String(repeating: "x", count: 4096))\"", "[]", "[null]", "{}", "{\"a\":1}",
        ]
        var expected: [ObjectIdentifier: [String]] = [:]
        var sent = 0
        for (n, (client, plain)) in requests.enumerated() {
            var request = plain
            if request["type"]?.string != "ack" { request["id"] = .string(Self.idSlot) }
            for part in 1..<Self.parts(of: .object(request)) {
                var next = 0
                let template = Self.replacing(part, in: .object(request), next: &next).text
                for (k, other) in others.enumerated() {
                    let id = "p\(n).\(part).\(k)"
                    let text = template.replacingOccurrences(of: "\"\(Self.slot)\"", with: other)
                        .replacingOccurrences(of: Self.idSlot, with: id)
                    try client.c.sendRaw(framed(Array(text.utf8)))
                    sent += 1
                    if template.contains(Self.idSlot) { expected[ObjectIdentifier(client), default: []].append(id) }
                }
            }
        }
        XCTAssertGreaterThan(sent, 1000)
        // A ping is answered after the replies to everything sent before it.
        for client in [child, guardian, admin] {
            try client.send(["type": "ping"])
            let ids = Set(expected[ObjectIdentifier(client)] ?? [])
            var replied = Set<String>()
            while let f = try client.c.receive(), f["type"]?.string != "pong" {
                // (An id replaced by another string is no longer one of ours.)
                guard let re = f["re"]?.string, ids.contains(re) else { continue }
                XCTAssertTrue(replied.insert(re).inserted, "two replies to \(re)")
            }
            XCTAssertEqual(ids.subtracting(replied).sorted(), [], "requests without a reply")
        }
        // Still serving a full cycle.
        XCTAssertEqual(try guardian.request(["type": "setLimits", "child": "c0", "enabled": true])["type"]?.string, "ok")
        let id = UUID().uuidString
        XCTAssertEqual(try child.request(["type": "subscribe", "topics": ["communication"]])["type"]?.string, "ok")
        XCTAssertEqual(try child.request(["type": "ask", "question": question(id)])["type"]?.string, "ok")
        XCTAssertEqual(try guardian.request(["type": "answer", "questionId": .string(id), "choice": "approve"])["type"]?.string, "ok")
        XCTAssertEqual(try child.event("response")["question"]?["id"]?.string, id)
        XCTAssertEqual(relay.terminate(), 0)
    }

    private static let slot = "@@another-kind-of-value@@"
    private static let idSlot = "@@request-id@@"

    /// How many parts `json` has, itself included (every value, however deep).
    private static func parts(of json: JSON) -> Int {
        switch json {
        case .object(let o): 1 + o.fields.reduce(0) { $0 + parts(of: $1.value) }
        case .array(let a): 1 + a.reduce(0) { $0 + parts(of: $1) }
        default: 1
        }
    }

    /// `json` with its part number `target` (numbered depth first from `next`, itself
    /// first) replaced by the string `slot`.
    private static func replacing(_ target: Int, in json: JSON, next: inout Int) -> JSON {
        let number = next
        next += 1
        if number == target { return .string(slot) }
        switch json {
        case .object(let o): return .object(JSONObject(o.fields.map { .init($0.key, replacing(target, in: $0.value, next: &next)) }))
        case .array(let a): return .array(a.map { replacing(target, in: $0, next: &next) })
        default: return json
        }
    }
}
