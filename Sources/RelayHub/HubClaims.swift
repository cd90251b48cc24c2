// The signed JWTs of a NATS hub in operator mode, which is how one hub keeps families
// apart: the operator (the hub's owner) signs one account per family, and a family's
// account signs one user per device. A JWT is public (it proves, it does not unlock);
// each key's seed stays where it was made.

import CCrypto
import Foundation

/// A JWT of NATS's operator mode: claims in JSON, signed with an nkey.
public struct HubJWT: Sendable {
    /// The text: `header.claims.signature`, each part base64url.
    public let text: String
    /// The public key it names (`sub`), who signed it (`iss`), its name and when it was made.
    public let subject: String
    public let issuer: String
    public let name: String
    public let issuedAt: Int64
    /// The family a device's JWT is for (its `family:` tag), or nil.
    public let family: String?
    /// The keys an account's JWT no longer trusts, and since when (seconds since 1970).
    public let revocations: [String: Int64]

    /// Signs a claim about `subject` with `issuer`'s key.
    static func sign(subject: String, name: String, nats: [String: Any], by issuer: NKey, issuedAt: Int64) throws -> HubJWT {
        var claims: [String: Any] = ["iat": issuedAt, "iss": issuer.publicKey, "name": name, "sub": subject, "nats": nats]
        // The id NATS's tools give a claim: a hash of the claims without it.
        claims["jti"] = NKeyText.base32(sha256(try json(claims)))
        let signed = base64URL(try json(["alg": "ed25519-nkey", "typ": "JWT"])) + "." + base64URL(try json(claims))
        let text = signed + "." + base64URL(try issuer.sign(Array(signed.utf8)))
        return try HubJWT(text)
    }

    /// Reads a JWT and checks its signature against its issuer.
    public init(_ text: String) throws {
        let parts = text.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let body = Self.fromBase64URL(parts[1]), let signature = Self.fromBase64URL(parts[2]),
            let claims = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let subject = claims["sub"] as? String, let issuer = claims["iss"] as? String,
            let nats = claims["nats"] as? [String: Any]
        else { throw NKeyError("not a NATS JWT") }
        guard NKey.verify(signature, of: Array((parts[0] + "." + parts[1]).utf8), by: issuer) else {
            throw NKeyError("a NATS JWT whose signature is not its issuer's")
        }
        self.text = parts.joined(separator: ".")
        self.subject = subject
        self.issuer = issuer
        name = claims["name"] as? String ?? ""
        issuedAt = (claims["iat"] as? NSNumber)?.int64Value ?? 0
        let tag = (nats["tags"] as? [Any])?.compactMap { $0 as? String }.first { $0.hasPrefix("family:") }
        family = tag.flatMap { Self.fromHex($0.dropFirst("family:".count)) }
        revocations = (nats["revocations"] as? [String: Any] ?? [:]).compactMapValues { ($0 as? NSNumber)?.int64Value }
    }

    /// How much of the hub's disk one family may use (its stream: questions and decisions
    /// for the relays' retention window).
    static let familyDiskBytes = 1 << 30

    /// The operator: the hub's owner, who vouches for every family's account.
    static func operatorClaims(systemAccount: String) -> [String: Any] {
        ["system_account": systemAccount, "type": "operator", "version": 2]
    }

    /// A family's account (with JetStream: one stream on disk, of at most
    /// `familyDiskBytes`, and a consumer per device), or the hub's system account
    /// (without); and the devices it no longer trusts (`revoked`: key → since when). The
    /// limits keep one family's devices from filling the hub for every other family.
    static func accountClaims(jetStream: Bool, revoked: [String: Int64]) -> [String: Any] {
        let limits: [String: Any] = [
            "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": true, "conn": -1, "leaf": -1,
            "mem_storage": 0, "disk_storage": jetStream ? familyDiskBytes : 0, "streams": jetStream ? 1 : 0,
            "consumer": jetStream ? 64 : 0,
        ]
        var claims: [String: Any] = ["limits": limits, "type": "account", "version": 2, "default_permissions": ["pub": [:], "sub": [:]]]
        if !revoked.isEmpty { claims["revocations"] = revoked }
        return claims
    }

    /// A device of a family: it may publish and read only what the relay's bridge does —
    /// the family's subjects, its stream, and its own consumer.
    static func deviceClaims(family: String, names: HubFamilyNames) -> [String: Any] {
        let (stream, consumer) = (names.stream, names.consumer)
        let publish = [
            names.subjects,
            "$JS.API.INFO",
            "$JS.API.STREAM.INFO.\(stream)", "$JS.API.STREAM.CREATE.\(stream)", "$JS.API.STREAM.MSG.GET.\(stream)",
            "$JS.API.DIRECT.GET.\(stream).>",
            "$JS.API.CONSUMER.INFO.\(stream).\(consumer)", "$JS.API.CONSUMER.DURABLE.CREATE.\(stream).\(consumer)",
            "$JS.API.CONSUMER.CREATE.\(stream).\(consumer)", "$JS.API.CONSUMER.CREATE.\(stream).\(consumer).>",
            "$JS.ACK.\(stream).\(consumer).>",
        ]
        return [
            "pub": ["allow": publish], "sub": ["allow": ["_INBOX.>"]], "subs": -1, "data": -1, "payload": -1,
            "tags": ["family:" + hex(family)],
            "type": "user", "version": 2,
        ]
    }

    /// The system account's user: the hub's own administration (pushing accounts).
    static func adminClaims() -> [String: Any] {
        ["pub": [:], "sub": [:], "subs": -1, "data": -1, "payload": -1, "type": "user", "version": 2]
    }

    static func hex(_ text: String) -> String { text.utf8.map { String(format: "%02x", $0) }.joined() }

    private static func fromHex(_ hex: Substring) -> String? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        for i in stride(from: 0, to: digits.count, by: 2) {
            guard let b = UInt8(String(decoding: digits[i..<i + 2], as: UTF8.self), radix: 16) else { return nil }
            bytes.append(b)
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func json(_ value: [String: Any]) throws -> [UInt8] {
        Array(try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .withoutEscapingSlashes]))
    }

    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    private static func fromBase64URL(_ text: Substring) -> [UInt8]? {
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        s += String(repeating: "=", count: (4 - s.count % 4) % 4)
        return Data(base64Encoded: s).map(Array.init)
    }

    private static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
        _ = SHA256(bytes, bytes.count, &digest)
        return digest
    }
}

/// What a device of a family may touch on the hub: the family's stream, its subjects,
/// and the device's own durable consumer.
public struct HubFamilyNames: Sendable {
    public var stream: String
    public var subjects: String
    public var consumer: String

    public init(stream: String, subjects: String, consumer: String) {
        self.stream = stream
        self.subjects = subjects
        self.consumer = consumer
    }
}

/// A NATS credentials file: a user's JWT and seed, as libnats reads it.
public enum HubCredentials {
    public static func text(jwt: HubJWT, seed: NKey) -> String {
        """
        -----BEGIN NATS USER JWT-----
        \(jwt.text)
        ------END NATS USER JWT------

        ************************* IMPORTANT *************************
        NKEY Seed printed below can be used to sign and prove identity.
        NKEYs are sensitive and should be treated as secrets.

        -----BEGIN USER NKEY SEED-----
        \(seed.seed)
        ------END USER NKEY SEED------

        *************************************************************

        """
    }

    /// The JWT of a credentials file.
    public static func jwt(in text: String) throws -> HubJWT {
        let lines = text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        guard let start = lines.firstIndex(of: "-----BEGIN NATS USER JWT-----"), start + 1 < lines.count else {
            throw NKeyError("not a NATS credentials file (no JWT in it)")
        }
        return try HubJWT(lines[start + 1])
    }
}
