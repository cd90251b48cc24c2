// Member tokens: 256 bits from the system's CSPRNG, shown once, stored only as their
// SHA-256 (OpenSSL). A token has full entropy, so a plain hash suffices.

import CCrypto
import RelayProtocol

enum Token {
    /// A new token: 32 random bytes, base64url without padding (43 characters).
    static func generate() -> String {
        var rng = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        var out: [UInt8] = []
        var i = 0
        while i < bytes.count {
            let b0 = UInt32(bytes[i])
            let b1 = i + 1 < bytes.count ? UInt32(bytes[i + 1]) : 0
            let b2 = i + 2 < bytes.count ? UInt32(bytes[i + 2]) : 0
            let n = b0 << 16 | b1 << 8 | b2
            let chars = min(4, (bytes.count - i) * 4 / 3 + 1)
            for k in 0..<chars { out.append(alphabet[Int(n >> UInt32(18 - 6 * k) & 63)]) }
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func hash(_ token: String) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
        let bytes = Array(token.utf8)
        _ = bytes.withUnsafeBufferPointer { SHA256($0.baseAddress, $0.count, &digest) }
        return digest
    }

    /// Whether `token` hashes to `stored`, compared in constant time.
    static func matches(_ token: String, _ stored: [UInt8]) -> Bool {
        let h = hash(token)
        guard h.count == stored.count else { return false }
        return CRYPTO_memcmp(h, stored, h.count) == 0
    }
}
