// Generated inputs for the tests that hold a reader to the parser: a seeded generator,
// mutations, choices that are mostly good, and JSON written compactly or spaced out.

import RelayProtocol

/// A small deterministic generator so failures reproduce.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// One to three bytes deleted, inserted or replaced, mostly JSON's own.
    mutating func mutate(_ bytes: inout [UInt8]) {
        let specials = Array("{}[]\",:\\0-.eE tfn".utf8) + [0xFF, 0x00, 0xC3]
        for _ in 0..<(1 + Int(next() % 3)) {
            guard !bytes.isEmpty else { return }
            let i = Int(next() % UInt64(bytes.count))
            switch next() % 3 {
            case 0: bytes.remove(at: i)
            case 1: bytes.insert(specials[Int(next() % UInt64(specials.count))], at: i)
            default: bytes[i] = specials[Int(next() % UInt64(specials.count))]
            }
        }
    }
}

/// One of `good` eleven times in twelve, else one of `bad`.
func pick<T>(_ good: [T], or bad: [T], _ rng: inout SplitMix) -> T {
    let list = rng.next() % 12 == 0 ? bad : good
    return list[Int(rng.next() % UInt64(list.count))]
}

/// Compact, or with whitespace around every token.
func render(_ value: JSON, spaced: Bool, _ rng: inout SplitMix) -> [UInt8] {
    var out: [UInt8] = []
    func space() { if spaced { out += [[0x20], [0x0A], [0x09, 0x20], []][Int(rng.next() % 4)] } }
    func write(_ v: JSON) {
        space()
        switch v {
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (k, item) in items.enumerated() {
                if k > 0 { out.append(UInt8(ascii: ",")) }
                write(item)
            }
            space()
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            for (k, field) in o.fields.enumerated() {
                if k > 0 { out.append(UInt8(ascii: ",")) }
                write(.string(field.key))
                space()
                out.append(UInt8(ascii: ":"))
                write(field.value)
            }
            space()
            out.append(UInt8(ascii: "}"))
        default:
            v.encode(into: &out)
        }
        space()
    }
    write(value)
    return out
}

/// Renders `rounds` generated objects (spaced out one time in four) and hands each to
/// `seen`; every one that `read` takes is mutated `mutations` times and read again.
/// Returns how many were read, before and after a mutation.
func readGeneratedAndMutated(
    seed: UInt64, rounds: Int, mutations: Int, _ generate: (inout SplitMix) -> JSONObject,
    seen: ([UInt8]) -> Void = { _ in }, read: ([UInt8]) throws -> Bool
) rethrows -> (read: Int, readMutated: Int) {
    var rng = SplitMix(seed: seed)
    var counts = (read: 0, readMutated: 0)
    for _ in 0..<rounds {
        let body = render(.object(generate(&rng)), spaced: rng.next() % 4 == 0, &rng)
        seen(body)
        guard try read(body) else { continue }
        counts.read += 1
        for _ in 0..<mutations {
            var mutated = body
            rng.mutate(&mutated)
            if try read(mutated) { counts.readMutated += 1 }
        }
    }
    return counts
}
