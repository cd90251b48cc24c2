// The frames a busy relay reads most after asks — answers and acks — read straight from
// their bytes when every field is a plain string or a small integer (as clients write
// them). Anything else is left to `JSON.parse`, which reads all of JSON and says what is
// wrong; tests hold the two to the same results.

/// An `answer` or an `ack` read without a tree.
public enum FlatRequest: Equatable, Sendable {
    /// An answer to a question whose id is a UUID (any other id is left to the parser,
    /// which says what is wrong with it).
    case answer(id: String, question: QuestionID, choice: String)
    /// An ack up to `seq` (an id it carries is not needed: a valid ack has no reply).
    case ack(seq: Int64)

    private static let fields: [StaticString] = ["type", "id", "questionId", "choice", "seq"]

    /// Reads `{"type":"answer","id":…,"questionId":…,"choice":…}` or
    /// `{"type":"ack","seq":…}` (with or without an id), fields in any order; nil for
    /// anything else.
    public static func read(_ body: [UInt8]) -> FlatRequest? { body.withUnsafeBufferPointer(read) }

    /// The same, from bytes read in place.
    public static func read(_ buf: UnsafeBufferPointer<UInt8>) -> FlatRequest? {
        var r = PlainReader(buf)
        guard r.take(UInt8(ascii: "{")) else { return nil }
        var fields = PlainReader.Fields(ordered: false)
        var isAnswer = false
        var id: String?
        var question: QuestionID?
        var choice: String?
        var seq: Int64?
        while let k = r.nextField(of: Self.fields, &fields) {
            switch k {
            case 0:
                guard let type = r.plainString() else { return nil }
                isAnswer = PlainReader.equal(type, "answer")
                guard isAnswer || PlainReader.equal(type, "ack") else { return nil }
            case 4:
                guard let n = r.plainInteger() else { return nil }
                seq = n
            case 2:
                // Read from its bytes: a string of its 36 characters would be made and dropped.
                guard let s = r.plainString(), let key = QuestionID(utf8: s) else { return nil }
                question = key
            default:
                guard let s = r.plainString() else { return nil }
                let value = String(decoding: s, as: UTF8.self)
                if k == 1 { id = value } else { choice = value }
            }
        }
        r.skipSpace()
        guard !r.failed, r.i == buf.count, fields.seen & 1 == 1 else { return nil }
        if isAnswer {
            guard fields.seen == 0b01111, let id, let question, let choice else { return nil }
            return .answer(id: id, question: question, choice: choice)
        }
        guard fields.seen & 0b01100 == 0, let seq else { return nil }
        return .ack(seq: seq)
    }
}
