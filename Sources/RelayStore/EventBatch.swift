// A member's consecutive events stored as one row: a checkpoint writes one row per
// member however many events it carries, so events cost sequential bytes rather than a
// b-tree insert (and a page) each.

import RelayProtocol

enum EventBatch {
    static func encode(_ events: ArraySlice<EventRecord>) -> [UInt8] {
        var w = ByteWriter(capacity: events.reduce(0) { $0 + $1.frame.count + 16 })
        for e in events { write(e, into: &w) }
        return w.bytes
    }

    static func decode(_ bytes: [UInt8], member: String) throws -> [EventRecord] {
        var r = ByteReader(bytes: bytes)
        var out: [EventRecord] = []
        while !r.atEnd { out.append(try read(member: member, from: &r)) }
        return out
    }

    /// An event without its member (which the row or the journal entry names).
    static func write(_ e: EventRecord, into w: inout ByteWriter) {
        w.int(e.seq)
        w.int(e.at.milliseconds)
        w.string(e.topic?.rawValue ?? "")
        w.data(e.frame)
    }

    static func read(member: String, from r: inout ByteReader) throws -> EventRecord {
        let seq = try r.int(), at = Timestamp(milliseconds: try r.int()), topic = try r.string()
        return EventRecord(
            member: member, seq: seq, at: at, topic: topic.isEmpty ? nil : TopicKind(rawValue: topic), frame: try r.data())
    }
}
