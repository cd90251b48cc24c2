// A family on two devices: a relay on each, linked through a real nats-server with
// JetStream. A child asks on the tablet, a guardian answers on the laptop; two
// guardians race from both; and nothing is lost to the hub being killed meanwhile.

import Foundation
import RelayProtocol
import XCTest

final class CrossDeviceTests: XCTestCase {
    /// Relays on two "devices" linked through `hub`, each with the same family and members.
    private func devices(_ hub: NATSServer) throws -> (tablet: RelayProcess, laptop: RelayProcess, tokens: [[String: String]]) {
        let tablet = try RelayProcess(flags: ["--ask-rate-limit", "0", "--hub", hub.url, "--device", "tablet"])
        let laptop = try RelayProcess(flags: ["--ask-rate-limit", "0", "--hub", hub.url, "--device", "laptop"])
        try tablet.start()
        try laptop.start()
        return (tablet, laptop, [try tablet.provision(families: 1), try laptop.provision(families: 1)])
    }

    /// The child on the tablet (session "app", subscribed to communication) and the
    /// guardian on the laptop, said hello.
    private func connect(_ tablet: RelayProcess, _ laptop: RelayProcess, _ tokens: [[String: String]]) throws -> (
        child: Client, guardian: Client
    ) {
        let child = try tablet.connect()
        _ = try child.hello("c0", tokens[0]["c0"]!, session: "app")
        _ = try child.request(["type": "subscribe", "topics": ["communication"]])
        let guardian = try laptop.connect()
        _ = try guardian.hello("g0", tokens[1]["g0"]!)
        return (child, guardian)
    }

    private func ask(_ child: Client) throws -> String {
        let id = UUID().uuidString
        let person: JSON = .object(["handle": .object(["value": "+1 555 0142", "kind": "phoneNumber"])])
        let reply = try child.request([
            "type": "ask",
            "question": .object(["id": .string(id), "topic": .object(["kind": "communication", "personInformation": .array([person])])]),
        ])
        XCTAssertEqual(reply["type"]?.string, "ok", "\(reply)")
        return id
    }

    func testAQuestionAskedOnTheTabletIsAnsweredOnTheLaptop() throws {
        let hub = try NATSServer()
        let (tablet, laptop, tokens) = try devices(hub)
        let (child, guardian) = try connect(tablet, laptop, tokens)
        let id = try ask(child)
        let question = try guardian.event("question")
        XCTAssertEqual(question["question"]?["id"]?.string, id, "the question crossed to the laptop")
        let reply = try guardian.request(["type": "answer", "questionId": .string(id), "choice": "approve"])
        XCTAssertEqual(reply["type"]?.string, "ok", "\(reply)")
        let response = try child.event("response")
        XCTAssertEqual(response["questionId"]?.string ?? response["question"]?["id"]?.string, id)
        XCTAssertEqual(response["guardian"]?.string, "g0")
        // The decision came to the tablet from the hub: its status says when it last heard from it.
        XCTAssertNotNil(try tablet.admin().request(["type": "status"])["hub"]?["lastContact"]?.string)
        // Both relays hold the same answer.
        for (relay, t) in [(tablet, tokens[0]), (laptop, tokens[1])] {
            let g = try relay.connect()
            _ = try g.hello("g0", t["g0"]!)
            let history = try g.request(["type": "history"])["questions"]?.array ?? []
            XCTAssertEqual(history.first?["status"]?.string, "answered")
            XCTAssertEqual(history.first?["outcome"]?["choice"]?["id"]?.string, "approve")
        }
    }

    func testTwoGuardiansRacingFromTwoDevicesGetOneAnswerBetweenThem() throws {
        let hub = try NATSServer()
        let (tablet, laptop, tokens) = try devices(hub)
        let child = try tablet.connect()
        _ = try child.hello("c0", tokens[0]["c0"]!)
        let here = try tablet.connect()
        _ = try here.hello("g0", tokens[0]["g0"]!)
        let there = try laptop.connect()
        _ = try there.hello("g0", tokens[1]["g0"]!)
        let id = try ask(child)
        _ = try here.event("question")
        _ = try there.event("question")
        try here.send(["type": "answer", "id": "h", "questionId": .string(id), "choice": "approve"])
        try there.send(["type": "answer", "id": "t", "questionId": .string(id), "choice": "decline"])
        let replies = [try here.reply("h"), try there.reply("t")]
        XCTAssertEqual(replies.filter { $0["type"]?.string == "ok" }.count, 1, "\(replies)")
        XCTAssertEqual(replies.filter { $0["code"]?.string == "alreadyAnswered" }.count, 1, "\(replies)")
        let winner = replies[0]["type"]?.string == "ok" ? "approve" : "decline"
        for (relay, t) in [(tablet, tokens[0]), (laptop, tokens[1])] {
            let g = try relay.connect()
            _ = try g.hello("g0", t["g0"]!)
            let history = try g.request(["type": "history"])["questions"]?.array ?? []
            XCTAssertEqual(history.first?["outcome"]?["choice"]?["id"]?.string, winner, "every device holds the winner")
        }
    }

    /// A hub out of reach from the start is said once (then once a minute), not at every
    /// try: the journal of a relay whose hub is down stays readable.
    func testAHubOutOfReachIsLoggedOnceNotAtEveryTry() throws {
        let closedPort = try NATSServer.freePort()
        let relay = try RelayProcess(flags: ["--ask-rate-limit", "0", "--hub", "nats://127.0.0.1:\(closedPort)", "--device", "tablet"])
        try relay.start()
        let tokens = try relay.provision(families: 1)
        func warnings() -> Int {
            let log = (try? String(contentsOf: relay.logFile, encoding: .utf8)) ?? ""
            return log.components(separatedBy: "trying again").count - 1
        }
        let deadline = Date().addingTimeInterval(15)
        while warnings() == 0 && Date() < deadline { usleep(50_000) }
        XCTAssertEqual(warnings(), 1, "the first try's failure is said")
        let child = try relay.connect()
        _ = try child.hello("c0", tokens["c0"]!)
        for _ in 0..<3 { _ = try ask(child) }  // each wants to go out through the hub
        // Tries come several times a second while the hub is out of reach: a few seconds
        // hold many of them.
        usleep(3_000_000)
        XCTAssertEqual(warnings(), 1, (try? String(contentsOf: relay.logFile, encoding: .utf8)) ?? "")
    }

    func testAQuestionAskedWhileTheHubIsDownArrivesOnceItIsBack() throws {
        let hub = try NATSServer()
        let (tablet, laptop, tokens) = try devices(hub)
        let child = try tablet.connect()
        _ = try child.hello("c0", tokens[0]["c0"]!)
        let guardian = try laptop.connect()
        _ = try guardian.hello("g0", tokens[1]["g0"]!)
        _ = try ask(child)  // links both relays' streams before the hub goes down
        _ = try guardian.event("question")
        let admin = try tablet.admin()
        hub.kill()
        let id = try ask(child)  // stored on the tablet: its outbox keeps it
        let linked = try admin.request(["type": "status"])["hub"]
        XCTAssertEqual(linked?["device"]?.string, "tablet")
        XCTAssertGreaterThanOrEqual(linked?["outbox"]?.int ?? 0, 1, "the question waits in the outbox")
        try hub.start()
        let question = try guardian.event("question")
        XCTAssertEqual(question["question"]?["id"]?.string, id)
        XCTAssertEqual(try guardian.request(["type": "answer", "questionId": .string(id), "choice": "decline"])["type"]?.string, "ok")
        // The laptop took all the hub held for it: its status says so once it has looked (every 5 s).
        let laptopAdmin = try laptop.admin()
        let deadline = Date().addingTimeInterval(15)
        var hubStatus = try laptopAdmin.request(["type": "status"])["hub"]
        while hubStatus?["inbox"]?.int != 0 && Date() < deadline {
            usleep(200_000)
            hubStatus = try laptopAdmin.request(["type": "status"])["hub"]
        }
        XCTAssertEqual(hubStatus?["inbox"]?.int, 0, "\(String(describing: hubStatus))")
    }

    /// With the hub out of reach, the child's program says its question waits for the
    /// family's other devices, and the guardian's says so of its answer, which completes
    /// once the hub is back.
    func testTheProgramsSayWhenTheyWaitForTheFamilysOtherDevices() throws {
        let hub = try NATSServer()
        let (tablet, laptop, tokens) = try devices(hub)
        let (child, guardian) = try connect(tablet, laptop, tokens)
        let crossed = try ask(child)
        _ = try guardian.event("question")
        let unconfirmed = try ask(child)
        _ = try guardian.event("question")
        func env(_ relay: RelayProcess) -> [String: String] {
            ["PERMISSION_RELAY_SOCKET": relay.socket, "PERMISSION_STATE_DIR": relay.dir.appendingPathComponent("state").path]
        }
        let asChild = ["--member", "c0", "--token", tokens[0]["c0"]!]
        let linked = try ProgramRun("permission-child", ["ask", "+1 555 0178", "--json"] + asChild, env: env(tablet))
        XCTAssertEqual(try JSON.parse(linked.nextLine() ?? "")["waitingForDevices"], nil, "the hub is reachable")
        XCTAssertEqual(linked.finish(), 0)

        hub.kill()
        // Each relay hears from libnats that the link is down: the programs report what their relay knows.
        for relay in [tablet, laptop] {
            let admin = try relay.admin()
            let deadline = Date().addingTimeInterval(10)
            while try admin.request(["type": "status"])["hub"]?["connected"]?.bool != false {
                guard Date() < deadline else { return XCTFail("the relay still says it is linked 10 s after the hub was killed") }
                usleep(20_000)
            }
        }
        let json = try ProgramRun("permission-child", ["ask", "+1 555 0177", "--json"] + asChild, env: env(tablet))
        XCTAssertEqual(try JSON.parse(json.nextLine() ?? "")["waitingForDevices"]?.bool, true)
        XCTAssertEqual(json.finish(), 0)
        let text = try ProgramRun("permission-child", ["ask", "+1 555 0176"] + asChild, env: env(tablet), stderrInLines: true)
        XCTAssertNotNil(text.nextLine(containing: "waiting for the family's other devices"))
        XCTAssertEqual(text.finish(), 0)

        let asGuardian = ["--member", "g0", "--token", tokens[1]["g0"]!]
        // Not confirmed before the program's 3 s are up: it says so, with a status of its own.
        let kept = try ProgramRun(
            "permission-guardian", ["answer", unconfirmed, "decline"] + asGuardian, env: env(laptop), stderrInLines: true)
        XCTAssertNotNil(kept.nextLine(containing: "the answer is kept here and counts once the hub has it"), "\(kept.lines)")
        XCTAssertEqual(kept.finish(), 5)
        let answer = try ProgramRun(
            "permission-guardian", ["answer", crossed, "approve"] + asGuardian, env: env(laptop), stderrInLines: true)
        let stop = answer.stopAfter(seconds: 60)
        defer { stop.cancel() }
        XCTAssertNotNil(answer.nextLine(containing: "waiting for the family's other devices: the hub is out of reach"), "\(answer.lines)")
        try hub.start()
        XCTAssertNotNil(answer.nextLine(containing: "answered \(crossed) with approve"))
        XCTAssertEqual(answer.finish(), 0)
        // The kept answer counts too, once the hub is back.
        let responses = try [child.event("response"), child.event("response")]
        XCTAssertEqual(Set(responses.compactMap { $0["question"]?["id"]?.string }), [crossed, unconfirmed])
        XCTAssertEqual(responses.map { $0["guardian"]?.string }, ["g0", "g0"])
    }

    /// The laptop's relay is killed as its guardian answers, the tablet's as the answer
    /// comes back: started again, each finishes what it had, and the child is told once.
    func testRelaysKilledAroundAnAnswerLoseNothingAndRepeatNothing() throws {
        let hub = try NATSServer()
        let (tablet, laptop, tokens) = try devices(hub)
        var (child, guardian) = try connect(tablet, laptop, tokens)
        let id = try ask(child)
        _ = try guardian.event("question")
        try guardian.send(["type": "answer", "id": "a", "questionId": .string(id), "choice": "approve"])
        laptop.crash()
        tablet.crash()
        try laptop.start()
        try tablet.start()
        // The guardian resends (its reply never came): the one decision stands.
        guardian = try laptop.connect()
        _ = try guardian.hello("g0", tokens[1]["g0"]!)
        XCTAssertEqual(try guardian.request(["type": "answer", "questionId": .string(id), "choice": "approve"])["type"]?.string, "ok")
        child = try tablet.connect()
        _ = try child.hello("c0", tokens[0]["c0"]!, session: "app", resume: 0)
        let response = try child.event("response")
        XCTAssertEqual(response["guardian"]?.string, "g0")
        // A marker question after it: the next response the child gets is the marker's.
        let marker = try ask(child)
        _ = try guardian.event("question")
        XCTAssertEqual(try guardian.request(["type": "answer", "questionId": .string(marker), "choice": "decline"])["type"]?.string, "ok")
        let next = try child.event("response")
        XCTAssertEqual(next["questionId"]?.string ?? next["question"]?["id"]?.string, marker, "the first response came once")
    }

    /// Thirty SIGKILLs spread over the hub and both relays, each right after a round's
    /// four asks or their answers, which may still be crossing the bridges: every question
    /// is answered once, both relays agree, and the child's stream holds one response per
    /// question, none twice.
    func testThirtyKillsOverTheHubAndBothRelaysLoseNothingAndRepeatNothing() throws {
        let hub = try NATSServer()
        let (tablet, laptop, tokens) = try devices(hub)
        /// Runs `body` on a fresh session until it goes through (a killed relay or hub
        /// drops the connection or lets a request time out; requests are safe to repeat).
        func until<T>(_ relay: RelayProcess, _ member: String, _ t: [String: String], _ body: (Client) throws -> T?) throws -> T {
            for _ in 0..<50 {
                if let c = try? relay.connect(), (try? c.hello(member, t[member]!))?["type"]?.string == "welcome",
                    let done = try? body(c)
                {
                    return done
                }
            }
            XCTFail("\(member) could not get through in 50 tries")
            throw CancellationError()
        }
        let victims: [() throws -> Void] = [
            {
                hub.kill(); try hub.start()
            },
            {
                tablet.crash(); try tablet.start()
            },
            {
                laptop.crash(); try laptop.start()
            },
        ]
        var asked: [String] = []
        for round in 0..<15 {
            // Four questions a round, sent together: a kill may find some of them, or their
            // answers, on their way through the bridges and the hub.
            let ids = (0..<4).map { _ in UUID().uuidString }
            let asks = ids.enumerated().map { i, id -> JSONObject in
                let person: JSON = .object(["handle": .object(["value": .string("+1 555 \(1000 + 4 * round + i)"), "kind": "phoneNumber"])])
                return [
                    "type": "ask", "id": .string("a\(i)"),
                    "question": .object([
                        "id": .string(id), "topic": .object(["kind": "communication", "personInformation": .array([person])]),
                    ]),
                ]
            }
            _ = try until(tablet, "c0", tokens[0]) { c -> Bool? in
                for ask in asks { try c.send(ask) }
                return try (0..<asks.count).allSatisfy { try c.reply("a\($0)")["type"]?.string == "ok" } ? true : nil
            }
            asked += ids
            try victims[(2 * round) % 3]()
            _ = try until(laptop, "g0", tokens[1]) { c -> Bool? in
                for (n, id) in ids.enumerated() {
                    let answer: JSONObject = [
                        "type": "answer", "questionId": .string(id), "choice": (round + n) % 2 == 0 ? "approve" : "decline",
                    ]
                    var r = try c.request(answer)
                    if r["code"]?.string == "notFound" {
                        // Not on the laptop yet: it comes through the hub.
                        while try c.event("question")["question"]?["id"]?.string != id.uppercased() {}
                        r = try c.request(answer)
                    }
                    guard r["type"]?.string == "ok" || r["code"]?.string == "alreadyAnswered" else { return nil }
                }
                return true
            }
            try victims[(2 * round + 1) % 3]()
        }
        /// Runs `body`; a failure says what was under way, with both relays' logs.
        func phase<T>(_ what: @autoclosure () -> String, _ body: () throws -> T) throws -> T {
            do {
                return try body()
            } catch {
                let logs = [tablet, laptop].map { r in
                    "log of the relay at \(r.socket):\n"
                        + String(((try? String(contentsOf: r.logFile, encoding: .utf8)) ?? "").suffix(3000))
                }
                XCTFail("\(what()): \(error)\n\(logs.joined(separator: "\n"))")
                throw error
            }
        }
        // Every question answered, on both relays alike (the last decisions may still be on
        // their way: each comes to the guardian as a questionClosed).
        for (relay, t) in [(tablet, tokens[0]), (laptop, tokens[1])] {
            try phase("the history at \(relay.socket)") {
                let g = try relay.connect()
                _ = try g.hello("g0", t["g0"]!)
                let list = try g.request(["type": "history", "limit": 100])["questions"]?.array ?? []
                var open = Set(asked.map { $0.uppercased() })
                for q in list where q["status"]?.string == "answered" { open.remove(q["id"]?.string ?? "") }
                while !open.isEmpty, let closed = try? g.event("questionClosed") {
                    XCTAssertEqual(closed["reason"]?.string, "answered")
                    open.remove(closed["questionId"]?.string ?? "")
                }
                XCTAssertEqual(open, [], "every question answered")
            }
        }
        // The child's stream, replayed from its start to a session that follows responses:
        // one response per question.
        var responses: [String] = []
        try phase("replaying the child's stream (responses so far: \(responses), asked: \(asked))") {
            let subscribing = try tablet.connect()
            _ = try subscribing.hello("c0", tokens[0]["c0"]!, session: "replay")
            _ = try subscribing.request(["type": "subscribe", "topics": ["communication"]])
            let child = try tablet.connect()
            _ = try child.hello("c0", tokens[0]["c0"]!, session: "replay", resume: 0)
            while responses.count < asked.count {
                let r = try child.event("response")
                responses.append(r["questionId"]?.string ?? r["question"]?["id"]?.string ?? "")
            }
        }
        XCTAssertEqual(responses.sorted(), asked.map { $0.uppercased() }.sorted(), "each question's response once")
    }
}
