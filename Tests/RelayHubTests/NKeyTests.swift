// nkeys as NATS writes them, checked against a key pair and a signature from NATS's own
// documentation, and the JWTs signed with them.

import XCTest

@testable import RelayHub

final class NKeyTests: XCTestCase {
    // The user key pair of NATS's documentation, and its signature of a server's nonce.
    private let seed = "SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY"
    private let publicKey = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"

    func testASeedGivesNATSsPublicKeyAndSignature() throws {
        let key = try NKey(seed: seed)
        XCTAssertEqual(key.kind, .user)
        XCTAssertEqual(key.publicKey, publicKey)
        XCTAssertEqual(key.seed, seed, "written back as it was read")
        let signature = try key.sign(Array("DhXdTMAeiHhLDig".utf8))
        XCTAssertEqual(
            Data(signature).base64EncodedString(),
            "WosANJXgeyxerXFo0twRiMG+/ZjYp1K/46bFeFax705yFTCTjM18jWl01gGYk4KKbadiHd+hP3WgUQ2iLZUAAA==")
        XCTAssertTrue(NKey.verify(signature, of: Array("DhXdTMAeiHhLDig".utf8), by: publicKey))
        XCTAssertFalse(NKey.verify(signature, of: Array("DhXdTMAeiHhLDiG".utf8), by: publicKey))
    }

    func testNewKeysOfEachKindRoundTrip() throws {
        for kind in NKey.Kind.allCases {
            let key = try NKey.generate(kind)
            XCTAssertEqual(try NKey(seed: key.seed), key)
            XCTAssertTrue(NKey.isPublicKey(key.publicKey, of: kind))
            XCTAssertEqual(key.publicKey.count, 56)
            XCTAssertEqual(key.seed.count, 58)
        }
        XCTAssertNotEqual(try NKey.generate(.user), try NKey.generate(.user))
    }

    func testADamagedKeyIsRefused() throws {
        var damaged = Array(seed.utf8)
        damaged[20] = damaged[20] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        XCTAssertThrowsError(try NKey(seed: String(decoding: damaged, as: UTF8.self)))
        XCTAssertThrowsError(try NKey(seed: publicKey), "a public key is not a seed")
        XCTAssertThrowsError(try NKey(seed: "SU0"))
        XCTAssertFalse(NKey.isPublicKey(publicKey, of: .account))
    }

    func testAJWTIsReadBackAndItsSignatureChecked() throws {
        let account = try NKey.generate(.account)
        let device = try NKey.generate(.user)
        let names = HubFamilyNames(stream: "FAM_736D69746873", subjects: "fam.smiths.>", consumer: "dev-746162")
        let jwt = try HubJWT.sign(
            subject: device.publicKey, name: "tablet", nats: HubJWT.deviceClaims(family: "smiths", names: names), by: account,
            issuedAt: 1_700_000_000)
        let read = try HubJWT(jwt.text)
        XCTAssertEqual(read.subject, device.publicKey)
        XCTAssertEqual(read.issuer, account.publicKey)
        XCTAssertEqual(read.name, "tablet")
        XCTAssertEqual(read.issuedAt, 1_700_000_000)
        XCTAssertEqual(read.family, "smiths")

        var parts = jwt.text.split(separator: ".").map(String.init)
        parts[1] = HubJWT.base64URL(Array(#"{"sub":"x","iss":"\#(account.publicKey)","nats":{}}"#.utf8))
        XCTAssertThrowsError(try HubJWT(parts.joined(separator: ".")), "claims changed after signing")
        XCTAssertEqual(try HubCredentials.jwt(in: HubCredentials.text(jwt: jwt, seed: device)).text, jwt.text)
    }
}
