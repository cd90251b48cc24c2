// Drives a RelayCore with plain values and a manual clock: connections are numbers,
// frames are JSON objects, and the outputs are sorted into an inbox per connection.

import Foundation
import RelayCore
import RelayProtocol
import RelayModel
import RelayStore
import XCTest

final class CoreHarness {
    var now = Timestamp(rfc3339: "2026-12-01T10:00:00Z")!
    let store: RelayStore
    let config: CoreConfig
    var core: RelayCore
    private var nextConn = 1
    private var nextRequest = 1
    var inbox: [ConnectionID: [JSONObject]] = [:]
    var closed: [ConnectionID: CloseReason] = [:]
    var tokens: [String: String] = [:]
    /// What the store keeps of each child's questions, as the relay's pruning passes
    /// enforce it (here after every commit); nil keeps everything.
    let kept: QuestionsKept?

    static let uid: UInt32 = 1000

    init(
        store: RelayStore = MemoryStore(), kept: QuestionsKept? = nil, configure: (inout CoreConfig) -> Void = { _ in }
    ) throws {
        self.kept = kept
        var c = CoreConfig()
        c.relayUID = Self.uid
        c.askRateLimit = 0
        configure(&c)
        self.config = c
        self.store = store
        self.core = RelayCore(config: c, snapshot: try store.load(), archive: store, now: now)
    }

    /// A relay restart over the same store.
    func restart() throws {
        try store.commit(core.takeChanges())
        core = RelayCore(config: config, snapshot: try store.load(), archive: store, now: now)
        inbox = [:]
    }

    func connect(uid: UInt32? = CoreHarness.uid) -> ConnectionID {
        let id = nextConn
        nextConn += 1
        core.connected(id, peerUID: uid)
        inbox[id] = []
        return id
    }

    func sendRaw(_ conn: ConnectionID, _ body: [UInt8]) {
        core.receive(conn, body: body, now: now)
        pump()
    }

    func send(_ conn: ConnectionID, _ o: JSONObject) { sendRaw(conn, o.encoded) }

    /// The rest of a loop turn, as the reactor runs it: a step of every replay (from the
    /// store), the commit of the turn's changes, then the outputs into the inboxes. After
    /// every commit the store must hold what the core does: a restart loses nothing.
    func pump() {
        for conn in core.replaying.sorted() {
            guard let (member, after) = core.replayPosition(conn) else { continue }
            let stored = try! store.events(member: member, after: after, limit: config.replayBatch)
            if let broken = core.continueReplay(conn, stored: stored, limit: config.replayBatch) { XCTFail(broken) }
        }
        try! store.commit(core.takeChanges())
        core.committed(throughTake: core.takes)
        if let kept { while try! store.maintainQuestions(keeping: kept, limit: 100) {} }
        assertStoreHoldsTheCoresState()
        for o in core.takeOutputs() {
            switch o {
            case .send(let c, let frame):
                let o = try! JSON.parse(frame.dropFirst(4)).object!
                inbox[c, default: []].append(o)
            case .close(let c, let reason):
                closed[c] = reason
            }
        }
    }

    func assertStoreHoldsTheCoresState(file: StaticString = #filePath, line: UInt = #line) {
        var stored = try! store.load().normalized
        var held = core.snapshot()
        // Cursors are stored lazily (§6): a stored one may be behind, never ahead.
        for (s, h) in zip(stored.sessions, held.sessions) where s.member == h.member && s.name == h.name {
            XCTAssertLessThanOrEqual(s.cursor, h.cursor, "a stored cursor ahead of the session's", file: file, line: line)
        }
        stored.sessions = stored.sessions.map { SessionRecord(member: $0.member, name: $0.name, cursor: 0, topics: $0.topics) }
        held.sessions = held.sessions.map { SessionRecord(member: $0.member, name: $0.name, cursor: 0, topics: $0.topics) }
        XCTAssertEqual(stored.questions.map(\.row), held.questions.map(\.row), "question rows", file: file, line: line)
        let differs = "what a restart would load differs from what the core holds"
        XCTAssertEqual(stored.families, held.families, differs, file: file, line: line)
        XCTAssertEqual(stored.members, held.members, differs, file: file, line: line)
        XCTAssertEqual(stored.questions, held.questions, differs, file: file, line: line)
        XCTAssertEqual(stored.knownHandles, held.knownHandles, differs, file: file, line: line)
        XCTAssertEqual(stored.sessions, held.sessions, differs, file: file, line: line)
        XCTAssertEqual(stored.heads, held.heads, differs, file: file, line: line)
        XCTAssertEqual(stored.hubOutbox, held.hubOutbox, differs, file: file, line: line)
    }

    /// What the core has for the hub and the hub has not stored yet, in order.
    var hubOutbox: [HubOutbound] { core.snapshot().hubOutbox }

    /// Delivers a message of the family's stream on the hub, as the bridge would.
    @discardableResult
    /// `sequence`: where the message is on the hub's stream (0: not said).
    func fromHub(_ m: HubOutbound, deliveries: UInt64 = 1, sequence: UInt64 = 0) -> HubApplied {
        let applied = core.hubMessage(subject: m.subject, body: m.body, deliveries: deliveries, sequence: sequence, now: now)
        pump()
        return applied
    }

    /// Sends a request with a fresh id; returns its reply and leaves other frames in the inbox.
    @discardableResult
    func request(_ conn: ConnectionID, _ o: JSONObject, file: StaticString = #filePath, line: UInt = #line) -> JSONObject {
        var o = o
        let id = "r\(nextRequest)"
        nextRequest += 1
        o["id"] = .string(id)
        send(conn, o)
        guard let i = inbox[conn]?.firstIndex(where: { $0["re"]?.string == id }) else {
            XCTFail("no reply to \(o.encoded.count)-byte \(o["type"]?.string ?? "?")", file: file, line: line)
            return [:]
        }
        return inbox[conn]!.remove(at: i)
    }

    @discardableResult
    func ok(_ conn: ConnectionID, _ o: JSONObject, file: StaticString = #filePath, line: UInt = #line) -> JSONObject {
        let r = request(conn, o, file: file, line: line)
        XCTAssertEqual(r["type"]?.string, "ok", "\(o["type"]?.string ?? ""): \(JSON.object(r).text)", file: file, line: line)
        return r
    }

    func error(
        _ conn: ConnectionID, _ o: JSONObject, _ code: ErrorCode, file: StaticString = #filePath, line: UInt = #line
    ) -> JSONObject {
        let r = request(conn, o, file: file, line: line)
        XCTAssertEqual(r["type"]?.string, "error", JSON.object(r).text, file: file, line: line)
        XCTAssertEqual(r["code"]?.string, code.rawValue, JSON.object(r).text, file: file, line: line)
        XCTAssertFalse(r["message"]?.string?.isEmpty ?? true, "an error says what was wrong", file: file, line: line)
        return r
    }

    /// Frames received on `conn` since the last call (events, pongs), oldest first.
    func drain(_ conn: ConnectionID) -> [JSONObject] {
        defer { inbox[conn] = [] }
        return inbox[conn] ?? []
    }

    func events(_ conn: ConnectionID, _ type: String) -> [JSONObject] {
        drain(conn).filter { $0["type"]?.string == type }
    }

    func admin() -> ConnectionID {
        let c = connect()
        send(c, ["type": "hello", "id": "h", "protocol": 1, "admin": true])
        XCTAssertEqual(drain(c).first?["type"]?.string, "welcome")
        return c
    }

    /// Families `fam` (guardians g1, g2; children c1, c2) and `other` (og1, oc1).
    func standardFamilies() {
        let a = admin()
        for (family, members) in [
            ("fam", [("g1", "guardian"), ("g2", "guardian"), ("c1", "child"), ("c2", "child")]),
            ("other", [("og1", "guardian"), ("oc1", "child")]),
        ] {
            ok(a, ["type": "createFamily", "family": .string(family)])
            for (m, role) in members {
                let r = ok(a, ["type": "addMember", "family": .string(family), "member": .string(m), "role": .string(role)])
                tokens[m] = r["token"]?.string
            }
        }
    }

    func login(
        _ member: String, session: String? = nil, resume: Int64? = nil, subscribe: [String]? = nil, helloTopics: JSON? = nil,
        file: StaticString = #filePath, line: UInt = #line
    ) -> (ConnectionID, JSONObject) {
        let c = connect(uid: 5000)
        var hello: JSONObject = [
            "type": "hello", "id": "h", "protocol": 1, "member": .string(member), "token": .string(tokens[member] ?? ""),
        ]
        if let session { hello["session"] = .string(session) }
        if let resume { hello["resume"] = .int(resume) }
        if let helloTopics { hello["topics"] = helloTopics }
        send(c, hello)
        let welcome = inbox[c]!.removeFirst()
        XCTAssertEqual(welcome["type"]?.string, "welcome", JSON.object(welcome).text, file: file, line: line)
        if let subscribe {
            ok(c, ["type": "subscribe", "topics": .array(subscribe.map { .string($0) })], file: file, line: line)
        }
        return (c, welcome)
    }

    /// `member`'s hello on `conn`, its turn left open: no replay step and no commit yet.
    func helloInTurn(_ conn: ConnectionID, _ member: String, session: String, resume: Int64) {
        let hello: JSONObject = [
            "type": "hello", "id": "h", "protocol": 1, "member": .string(member), "token": .string(tokens[member] ?? ""),
            "session": .string(session), "resume": .int(resume),
        ]
        core.receive(conn, body: hello.encoded, now: now)
    }

    func advance(seconds: Double) {
        now = Timestamp(milliseconds: now.milliseconds + Int64(seconds * 1000))
        core.tick(now: now)
        pump()
    }

    // MARK: - Questions

    static func person(_ value: String, kind: String = "phoneNumber") -> JSON {
        .object([
            "handle": .object(["value": .string(value), "kind": .string(kind)]),
            "nameComponents": .object(["givenName": "Kim"]), "avatarImage": .null,
        ])
    }

    func question(
        id: String = UUID().uuidString, handles: [String] = ["+1 555 0100"], actions: [String] = ["message"],
        expiresIn: Double? = 3600, choices: JSON? = nil, defaultChoice: String? = nil
    ) -> JSONObject {
        var q: JSONObject = [
            "id": .string(id),
            "topic": .object([
                "kind": "communication", "personInformation": .array(handles.map { Self.person($0) }),
                "actions": .array(actions.map { .string($0) }),
            ]),
        ]
        if let expiresIn { q["expirationDate"] = .string(Timestamp(milliseconds: now.milliseconds + Int64(expiresIn * 1000)).rfc3339) }
        if let choices { q["choices"] = choices }
        if let defaultChoice { q["defaultChoice"] = .string(defaultChoice) }
        return q
    }

    func updateQuestion(id: String = UUID().uuidString) -> JSONObject {
        ["id": .string(id), "topic": .object(["kind": "significantAppUpdate", "description": "Version 2 adds chat"])]
    }
}
