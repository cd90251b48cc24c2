// Events as schema versions 3 and 4 stored them: a member's consecutive events in one
// row (`eventBatches`), each event in the journal's compact form. Read by the migration
// to one row per event, and written only by the migration that made them.

import RelayModel
import RelayProtocol

enum EventBatch {
    static func encode(_ events: ArraySlice<EventRecord>) -> [UInt8] {
        var out: [UInt8] = []
        func int(_ v: Int64) {
            var u = UInt64(bitPattern: (v << 1) ^ (v >> 63))  // zigzag varint, as ByteReader reads it
            while u >= 0x80 {
                out.append(UInt8(truncatingIfNeeded: u) | 0x80)
                u >>= 7
            }
            out.append(UInt8(u))
        }
        func data<C: Collection<UInt8>>(_ b: C) {
            int(Int64(b.count))
            out.append(contentsOf: b)
        }
        for e in events {
            int(e.seq)
            int(e.at.milliseconds)
            data((e.topic?.rawValue ?? "").utf8)
            data(e.frame)
        }
        return out
    }

    static func decode(_ bytes: [UInt8], member: String) throws -> [EventRecord] {
        var r = ByteReader(bytes: bytes)
        var out: [EventRecord] = []
        while !r.atEnd { out.append(try read(member: member, from: &r)) }
        return out
    }

    /// An event without its member (which the row or the journal entry names).
    static func read(member: String, from r: inout ByteReader) throws -> EventRecord {
        let seq = try r.int(), at = Timestamp(milliseconds: try r.int()), topic = try r.string()
        return EventRecord(
            member: member, seq: seq, at: at, topic: topic.isEmpty ? nil : TopicKind(rawValue: topic), frame: try r.data())
    }
}
