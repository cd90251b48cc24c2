// NATS nkeys: Ed25519 key pairs (OpenSSL's) written as NATS writes them — a type
// prefix, the key, a CRC-16 (XMODEM) in little-endian order, all in base32 without
// padding. A seed ("S…") is the private key; a public key starts with its type's letter
// (O operator, A account, U user). Only the text form is ours to get right; the
// cryptography is OpenSSL's.

import CCrypto
import Foundation

/// An Ed25519 key pair in NATS's nkey form.
public struct NKey: Sendable, Equatable {
    /// What a key stands for; the letter its public key starts with.
    public enum Kind: UInt8, Sendable, CaseIterable {
        case operator_ = 112  // 14 << 3: "O"
        case account = 0  // "A"
        case user = 160  // 20 << 3: "U"
    }

    public let kind: Kind
    /// The 32 raw bytes of the private key.
    private let rawSeed: [UInt8]
    /// The 32 raw bytes of the public key.
    public let rawPublicKey: [UInt8]

    /// A new random key pair.
    public static func generate(_ kind: Kind) throws(NKeyError) -> NKey {
        var seed = [UInt8](repeating: 0, count: 32)
        guard RAND_bytes(&seed, 32) == 1 else { throw NKeyError("the system's random source failed") }
        return try NKey(kind: kind, rawSeed: seed)
    }

    /// The key pair of a seed (`S…`, as `seed` writes it).
    public init(seed: String) throws(NKeyError) {
        let bytes = try NKeyText.decode(seed.trimmingCharacters(in: .whitespacesAndNewlines))
        guard bytes.count == 34, bytes[0] & 0xF8 == NKeyText.seedPrefix else { throw NKeyError("not an nkey seed") }
        let prefix = (bytes[0] & 0x07) << 5 | (bytes[1] & 0xF8) >> 3
        guard let kind = Kind(rawValue: prefix) else { throw NKeyError("an nkey seed of an unknown kind") }
        try self.init(kind: kind, rawSeed: Array(bytes[2...]))
    }

    private init(kind: Kind, rawSeed: [UInt8]) throws(NKeyError) {
        self.kind = kind
        self.rawSeed = rawSeed
        guard let key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, rawSeed, 32) else {
            throw NKeyError("OpenSSL cannot make an Ed25519 key")
        }
        defer { EVP_PKEY_free(key) }
        var out = [UInt8](repeating: 0, count: 32)
        var length = 32
        guard EVP_PKEY_get_raw_public_key(key, &out, &length) == 1, length == 32 else {
            throw NKeyError("OpenSSL cannot give the public key")
        }
        rawPublicKey = out
    }

    /// The seed, the only secret: `S` and the kind's letter, 58 characters.
    public var seed: String {
        let prefix = kind.rawValue
        return NKeyText.encode([NKeyText.seedPrefix | prefix >> 5, (prefix & 31) << 3] + rawSeed)
    }

    /// The public key: the kind's letter, 56 characters.
    public var publicKey: String { NKeyText.encode([kind.rawValue] + rawPublicKey) }

    /// The Ed25519 signature of `message` (64 bytes).
    public func sign(_ message: [UInt8]) throws(NKeyError) -> [UInt8] {
        guard let key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, rawSeed, 32), let context = EVP_MD_CTX_new() else {
            throw NKeyError("OpenSSL cannot make an Ed25519 key")
        }
        defer {
            EVP_MD_CTX_free(context)
            EVP_PKEY_free(key)
        }
        var signature = [UInt8](repeating: 0, count: 64)
        var length = 64
        guard EVP_DigestSignInit(context, nil, nil, nil, key) == 1,
            EVP_DigestSign(context, &signature, &length, message, message.count) == 1, length == 64
        else { throw NKeyError("OpenSSL cannot sign") }
        return signature
    }

    /// Whether `signature` is `publicKey`'s (an nkey's text) over `message`.
    public static func verify(_ signature: [UInt8], of message: [UInt8], by publicKey: String) -> Bool {
        guard let bytes = try? NKeyText.decode(publicKey), bytes.count == 33,
            let key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, Array(bytes[1...]), 32)
        else { return false }
        defer { EVP_PKEY_free(key) }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        return EVP_DigestVerifyInit(context, nil, nil, nil, key) == 1
            && EVP_DigestVerify(context, signature, signature.count, message, message.count) == 1
    }

    /// Whether `text` is a well-formed public key of `kind`.
    public static func isPublicKey(_ text: String, of kind: Kind) -> Bool {
        guard let bytes = try? NKeyText.decode(text), bytes.count == 33 else { return false }
        return bytes[0] == kind.rawValue
    }
}

public struct NKeyError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// Base32 (RFC 4648, no padding) with a trailing CRC-16, as nkeys are written.
enum NKeyText {
    static let seedPrefix: UInt8 = 18 << 3  // "S"
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    static func encode(_ payload: [UInt8]) -> String {
        let crc = crc16(payload)
        return base32(payload + [UInt8(crc & 0xFF), UInt8(crc >> 8)])
    }

    static func base32(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        var buffer = 0
        var bits = 0
        for b in bytes {
            buffer = buffer << 8 | Int(b)
            bits += 8
            while bits >= 5 {
                bits -= 5
                out.append(alphabet[(buffer >> bits) & 31])
            }
        }
        if bits > 0 { out.append(alphabet[(buffer << (5 - bits)) & 31]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// The payload of `text`, its checksum checked.
    static func decode(_ text: String) throws(NKeyError) -> [UInt8] {
        var bytes: [UInt8] = []
        var buffer = 0
        var bits = 0
        for c in text.utf8 {
            guard let value = alphabet.firstIndex(of: c) else { throw NKeyError("not an nkey (a character outside base32)") }
            buffer = (buffer << 5 | value) & 0xFFFF
            bits += 5
            if bits >= 8 {
                bits -= 8
                bytes.append(UInt8((buffer >> bits) & 0xFF))
            }
        }
        guard bytes.count > 2 else { throw NKeyError("not an nkey (too short)") }
        let payload = Array(bytes[..<(bytes.count - 2)])
        let crc = UInt16(bytes[bytes.count - 2]) | UInt16(bytes[bytes.count - 1]) << 8
        guard crc16(payload) == crc else { throw NKeyError("not an nkey (its checksum is wrong)") }
        return payload
    }

    /// CRC-16/XMODEM (polynomial 0x1021, start 0).
    static func crc16(_ bytes: [UInt8]) -> UInt16 {
        var crc: UInt16 = 0
        for b in bytes {
            crc ^= UInt16(b) << 8
            for _ in 0..<8 { crc = crc & 0x8000 != 0 ? crc << 1 ^ 0x1021 : crc << 1 }
        }
        return crc
    }
}
