// The real binary, killed with SIGKILL in the middle of traffic: every acknowledged
// change and every event must be there after a restart, with the same seq.

import Foundation
import RelayProtocol
import XCTest

final class CrashTests: XCTestCase {
    /// Finished questions live on disk only: after a kill, each is read back for what
    /// names it (a resend, a re-ask, an answer) and for the lists, which stay whole.
    func testFinishedQuestionsAreReadBackFromDiskAfterAKill() throws {
        let relay = try RelayProcess(flags: ["--ask-rate-limit", "0"])
        try relay.start()
        let tokens = try relay.provision(families: 1)
        var child = try relay.connect()
        _ = try child.hello("c0", tokens["c0"]!)
        var guardian = try relay.connect()
        _ = try guardian.hello("g0", tokens["g0"]!)
        let asked = (0..<12).map { _ in question() }
        for q in asked { XCTAssertEqual(try child.request(["type": "ask", "question": q])["type"]?.string, "ok") }
        for q in asked[0..<8] {
            XCTAssertEqual(try guardian.request(["type": "answer", "questionId": q["id"]!, "choice": "approve"])["type"]?.string, "ok")
        }
        for q in asked[8..<10] { XCTAssertEqual(try child.request(["type": "cancel", "questionId": q["id"]!])["type"]?.string, "ok") }
        relay.crash()
        try relay.start()
        child = try relay.connect()
        _ = try child.hello("c0", tokens["c0"]!)
        guardian = try relay.connect()
        _ = try guardian.hello("g0", tokens["g0"]!)

        let resent = try child.request(["type": "ask", "question": asked[2]])
        XCTAssertEqual(resent["status"]?.string, "answered", "\(resent)")
        XCTAssertEqual(resent["response"]?["choice"]?["id"]?.string, "approve")
        XCTAssertEqual(try child.request(["type": "ask", "question": asked[9]])["attempt"]?.int, 2)
        let again = try guardian.request(["type": "answer", "questionId": asked[5]["id"]!, "choice": "approve"])
        XCTAssertEqual(again["type"]?.string, "ok", "the same answer again: \(again)")
        let other = try child.request(["type": "cancel", "questionId": asked[5]["id"]!])
        XCTAssertEqual(other["code"]?.string, "alreadyAnswered", "\(other)")
        XCTAssertEqual(try child.request(["type": "questions", "status": "answered"])["questions"]?.array?.count, 8)
        XCTAssertEqual(try guardian.request(["type": "pending"])["questions"]?.array?.count, 3)
        var listed: [String] = []
        var after: JSON?
        repeat {
            var request: JSONObject = ["type": "history", "limit": 5]
            request["after"] = after
            let page = try guardian.request(request)
            listed += page["questions"]?.array?.compactMap { $0["id"]?.string } ?? []
            after = page["next"]
        } while after != nil && listed.count < 100
        XCTAssertEqual(listed, asked.reversed().map { $0["id"]!.string!.uppercased() }, "every question once, newest first")
    }

    func testKillInTheMiddleOfTrafficLosesNothingAcknowledged() throws {
        let relay = try RelayProcess(flags: ["--ask-rate-limit", "0"])
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let child = try relay.connect()
        _ = try child.hello("c0", tokens["c0"]!, session: "app")
        XCTAssertEqual(try child.request(["type": "subscribe", "topics": ["communication"]])["type"]?.string, "ok")
        let guardian = try relay.connect()
        _ = try guardian.hello("g0", tokens["g0"]!, session: "phone")

        // Pipeline 300 asks; answer the ones that arrive; kill the relay while asks are in flight.
        let ids = (0..<300).map { _ in UUID().uuidString }
        for (i, id) in ids.enumerated() {
            try child.send(["type": "ask", "id": .string("a\(i)"), "question": question(id)])
        }
        var acknowledgedAsks: Set<String> = []
        for i in 0..<120 {
            let r = try child.reply("a\(i)")
            XCTAssertEqual(r["type"]?.string, "ok")
            acknowledgedAsks.insert(ids[i])
        }
        var guardianEvents: [Int64: String] = [:]
        var answered: Set<String> = []
        for n in 0..<60 {
            let ev = try guardian.event("question")
            let qid = ev["question"]!["id"]!.string!
            guardianEvents[ev["seq"]!.int!] = qid
            try guardian.send(["type": "answer", "id": .string("x\(n)"), "questionId": .string(qid), "choice": "approve"])
        }
        for n in 0..<40 {
            XCTAssertEqual(try guardian.reply("x\(n)")["type"]?.string, "ok")
            answered.insert(guardianEvents.sorted { $0.key < $1.key }[n].value)
        }
        relay.crash()

        try relay.start()
        // Every acknowledged ask is stored; every acknowledged answer is final.
        let c2 = try relay.connect()
        _ = try c2.hello("c0", tokens["c0"]!)
        let stored = try c2.request(["type": "questions"])["questions"]!.array!
        var status: [String: String] = [:]
        for q in stored { status[q["id"]!.string!] = q["status"]!.string! }
        for id in acknowledgedAsks { XCTAssertNotNil(status[id], "acknowledged ask \(id) lost") }
        for id in answered { XCTAssertEqual(status[id], "answered", "acknowledged answer to \(id) lost") }

        // The guardian's stream replays from 0 with the very same seqs.
        let g2 = try relay.connect()
        let w = try g2.hello("g0", tokens["g0"]!, session: "phone", resume: 0)
        let head = w["head"]!.int!
        var replayed: [Int64: String] = [:]
        var seq: Int64 = 0
        while seq < head {
            let ev = try g2.c.receive()!
            guard let s = ev["seq"]?.int else { continue }
            XCTAssertEqual(s, seq + 1, "seqs are dense and ordered")
            seq = s
            if ev["type"]?.string == "question" { replayed[s] = ev["question"]!["id"]!.string! }
        }
        for (s, id) in guardianEvents { XCTAssertEqual(replayed[s], id, "event \(s) changed across the crash") }

        // The child's responses: every acknowledged answer has its response event.
        let c3 = try relay.connect()
        let cw = try c3.hello("c0", tokens["c0"]!, session: "app", resume: 0)
        var responses: Set<String> = []
        var cseq: Int64 = 0
        while cseq < cw["head"]!.int! {
            let ev = try c3.c.receive()!
            guard let s = ev["seq"]?.int else { continue }
            cseq = s
            if ev["type"]?.string == "response" { responses.insert(ev["question"]!["id"]!.string!) }
        }
        XCTAssertTrue(answered.isSubset(of: responses))
        XCTAssertEqual(relay.terminate(), 0)
    }

    func testSyncFullSurvivesKillToo() throws {
        let relay = try RelayProcess(flags: ["--sync", "full"])
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let child = try relay.connect()
        _ = try child.hello("c0", tokens["c0"]!)
        let id = UUID().uuidString
        XCTAssertEqual(try child.request(["type": "ask", "question": question(id)])["type"]?.string, "ok")
        relay.crash()
        try relay.start()
        let g = try relay.connect()
        _ = try g.hello("g0", tokens["g0"]!)
        XCTAssertEqual(try g.request(["type": "pending"])["questions"]?.array?.first?["id"]?.string, id)
    }

    /// Thirty kills in the middle of traffic, each a restart later: nothing acknowledged
    /// is lost, a seq once seen is never given again, every resume goes on where it left
    /// off without a hole, and the store checks out at the end.
    func testThirtyKillsUnderLoadLoseNothingAcknowledgedAndReplayNoHole() throws {
        let relay = try RelayProcess(flags: ["--ask-rate-limit", "0", "--max-pending-per-child", "0"])
        try relay.start()
        let tokens = try relay.provision(families: 1)
        var acknowledgedAsks: Set<String> = []
        var acknowledgedAnswers: Set<String> = []
        var questionAt: [Int64: String] = [:]  // the guardian's stream as seen: seq → question id
        var seen: Int64 = 0  // the guardian's last seq seen
        for round in 0..<30 {
            if round > 0 { try relay.start() }
            let child = try relay.connect()
            _ = try child.hello("c0", tokens["c0"]!, session: "app")
            let guardian = try relay.connect()
            let w = try guardian.hello("g0", tokens["g0"]!, session: "phone", resume: seen)
            XCTAssertGreaterThanOrEqual(w["head"]?.int ?? 0, seen, "round \(round): the head went back: seqs would be given again")
            XCTAssertNil(w["gap"], "round \(round): nothing was dropped")
            // Asks pipelined; some of their replies read, the rest in flight at the kill.
            let ids = (0..<16).map { _ in UUID().uuidString }
            for (i, id) in ids.enumerated() { try child.send(["type": "ask", "id": .string("a\(i)"), "question": question(id)]) }
            let replied = Int.random(in: 1...ids.count)
            for i in 0..<replied {
                XCTAssertEqual(try child.reply("a\(i)")["type"]?.string, "ok")
                acknowledgedAsks.insert(ids[i])
            }
            // The guardian reads on, in order and without a hole, until it has every question
            // acknowledged this round, and answers some.
            var waiting = Set(ids.prefix(replied))
            var toAnswer: [String] = []
            while !waiting.isEmpty {
                guard let f = try guardian.c.receive() else { return XCTFail("round \(round): the relay closed the guardian") }
                guard let s = f["seq"]?.int else { continue }
                XCTAssertEqual(s, seen + 1, "round \(round): events in order, none missing")
                seen = s
                guard f["type"]?.string == "question", let id = f["question"]?["id"]?.string else { continue }
                XCTAssertNil(questionAt[s], "round \(round): seq \(s) given twice")
                questionAt[s] = id
                waiting.remove(id)
                if toAnswer.count < 4 { toAnswer.append(id) }
            }
            for (n, id) in toAnswer.enumerated() {
                try guardian.send(["type": "answer", "id": .string("x\(n)"), "questionId": .string(id), "choice": "approve"])
            }
            for n in 0..<Int.random(in: 0...toAnswer.count) {
                let r = try guardian.reply("x\(n)")
                XCTAssertEqual(r["type"]?.string, "ok", JSON.object(r).text)
                acknowledgedAnswers.insert(toAnswer[n])
            }
            for e in guardian.events {  // read while waiting for the replies: in order too
                guard let s = e["seq"]?.int else { continue }
                XCTAssertEqual(s, seen + 1, "round \(round): events in order, none missing")
                seen = s
            }
            relay.crash()
        }
        try relay.start()
        let g = try relay.connect()
        _ = try g.hello("g0", tokens["g0"]!)
        let history = try g.request(["type": "history", "limit": 10_000])["questions"]?.array ?? []
        var status: [String: String] = [:]
        for q in history { status[q["id"]?.string ?? ""] = q["status"]?.string }
        for id in acknowledgedAsks { XCTAssertNotNil(status[id], "acknowledged ask \(id) lost") }
        for id in acknowledgedAnswers { XCTAssertEqual(status[id], "answered", "acknowledged answer to \(id) lost") }
        // Replayed from the start, the guardian's stream holds every question where it was seen.
        let replay = try relay.connect()
        let w = try replay.hello("g0", tokens["g0"]!, session: "audit", resume: 0)
        var seq: Int64 = 0
        while seq < (w["head"]?.int ?? 0) {
            guard let f = try replay.c.receive() else { return XCTFail("closed during the replay") }
            guard let s = f["seq"]?.int else { continue }
            XCTAssertEqual(s, seq + 1, "the replay has no hole")
            seq = s
            if let id = questionAt[s] { XCTAssertEqual(f["question"]?["id"]?.string, id, "event \(s) changed across the kills") }
        }
        XCTAssertEqual(relay.terminate(), 0)
        let check = runRelay(["check", "--data", relay.data])
        XCTAssertEqual(check.status, 0, check.stderr)
    }
}
