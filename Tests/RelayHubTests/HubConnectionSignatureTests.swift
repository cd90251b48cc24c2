// A device's connect against a stand-in hub that checks the signature of its nonce as
// nats-server does. libnats 3.4.1 leaves out a signature whose first byte is zero, and
// ed25519 signatures are deterministic: a nonce chosen for the device's key makes that
// happen on the first try, every time.

import Foundation
import XCTest

@testable import RelayHub

final class HubConnectionSignatureTests: XCTestCase {
    private var directory = ""

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("hub-sig-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// A device's key and its credentials file (the JWT is not checked here).
    private func device() throws -> (NKey, String) {
        let seed = try NKey.generate(.user)
        let jwt = try HubJWT.sign(
            subject: seed.publicKey, name: "tablet", nats: ["type": "user"], by: try NKey.generate(.account), issuedAt: 0)
        let path = directory + "/tablet.creds"
        try HubCredentials.text(jwt: jwt, seed: seed).write(toFile: path, atomically: true, encoding: .utf8)
        return (seed, path)
    }

    /// A nonce whose signature by `key` starts with a zero byte (`zero`) or does not.
    private func nonce(signedBy key: NKey, startingWithZero zero: Bool) throws -> String {
        for n in 0..<100_000 {
            let nonce = "nonce\(n)"
            if try (key.sign(Array(nonce.utf8)).first == 0) == zero { return nonce }
        }
        throw XCTSkip("no such nonce among the first 100,000")
    }

    func testAConnectRefusedForASignatureLeftOutIsTriedAgain() throws {
        let (key, credentials) = try device()
        let hub = try StandInHub(nonces: [
            try nonce(signedBy: key, startingWithZero: true), try nonce(signedBy: key, startingWithZero: false),
        ])
        let connection = try HubConnection(url: hub.url, name: "tablet", credentials: credentials, timeoutMillis: 2000)
        XCTAssertTrue(connection.isConnected)
        XCTAssertEqual(hub.verdicts, [false, true], "refused once for the missing signature, then let in")
    }

    func testAHubThatRefusesEveryTryIsARefusal() throws {
        let (key, credentials) = try device()
        let hub = try StandInHub(nonces: Array(repeating: try nonce(signedBy: key, startingWithZero: true), count: 4))
        XCTAssertThrowsError(try HubConnection(url: hub.url, name: "tablet", credentials: credentials, timeoutMillis: 2000)) { error in
            XCTAssertTrue((error as? HubError)?.isRefused == true, "\(error)")
        }
        XCTAssertEqual(hub.verdicts, [false, false, false], "three tries, each refused")
    }
}

/// Speaks just enough of the NATS protocol to let a client in when its CONNECT carries a
/// valid signature of the nonce it was given, and to refuse it as nats-server does when not.
private final class StandInHub: @unchecked Sendable {
    let url: String
    private let listener: Int32
    private let lock = NSLock()
    private var nonces: [String]
    private var seen: [Bool] = []
    private var open: [Int32] = []

    /// The verdict on each connect so far: true for let in.
    var verdicts: [Bool] { lock.withLock { seen } }

    /// Gives the n-th connection the n-th of `nonces`.
    init(nonces: [String]) throws {
        self.nonces = nonces
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        listener = fd
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 && listen(fd, 8) == 0
            }
        }
        guard bound else { throw NSError(domain: "StandInHub", code: 1, userInfo: [NSLocalizedDescriptionKey: "cannot listen"]) }
        url = "nats://127.0.0.1:\(UInt16(bigEndian: addr.sin_port))"
        Thread { [self] in acceptLoop() }.start()
    }

    deinit {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        for fd in open { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    private func acceptLoop() {
        while true {
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else { return }
            let nonce: String? = lock.withLock {
                open.append(fd)
                return nonces.isEmpty ? nil : nonces.removeFirst()
            }
            guard let nonce else { close(fd); continue }
            Thread { [self] in serve(fd, nonce: nonce) }.start()
        }
    }

    private func serve(_ fd: Int32, nonce: String) {
        defer { close(fd) }
        send(
            fd,
            #"INFO {"server_id":"stand-in","version":"2.9.10","proto":1,"headers":true,"max_payload":1048576,"auth_required":true,"nonce":"\#(nonce)"}"#
                + "\r\n")
        var lines = LineReader(fd)
        guard let connect = lines.next(), connect.hasPrefix("CONNECT "),
            let fields = try? JSONSerialization.jsonObject(with: Data(connect.dropFirst(8).utf8)) as? [String: Any]
        else { return }
        let letIn = Self.verify(fields, nonce: nonce)
        lock.withLock { seen.append(letIn) }
        guard letIn else {
            send(fd, "-ERR 'Authorization Violation'\r\n")
            return
        }
        while let line = lines.next() {
            if line == "PING" { send(fd, "PONG\r\n") }
        }
    }

    /// As nats-server: a signature present, and valid for the key the JWT names.
    private static func verify(_ connect: [String: Any], nonce: String) -> Bool {
        guard let sig = connect["sig"] as? String, let jwt = (connect["jwt"] as? String).flatMap({ try? HubJWT($0) }) else { return false }
        var base64 = sig.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let signature = Data(base64Encoded: base64) else { return false }
        return NKey.verify(Array(signature), of: Array(nonce.utf8), by: jwt.subject)
    }

    private func send(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }
}

/// Lines of a socket, without their CRLF; nil once it closes.
private struct LineReader {
    let fd: Int32
    var buffer: [UInt8] = []

    init(_ fd: Int32) { self.fd = fd }

    mutating func next() -> String? {
        while true {
            if let end = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[..<end], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                buffer.removeSubrange(...end)
                return line
            }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = recv(fd, &chunk, chunk.count, 0)
            guard n > 0 else { return nil }
            buffer += chunk[..<n]
        }
    }
}
