// Lists of questions (`pending`, `history`, `questions`) in replies of bounded size. A
// child's questions may each carry an avatar of up to 256 KiB: all of them in one reply
// could outgrow what the relay lets a connection hold unsent, and it would drop the
// guardian asking, again at every try. A reply holds what fits in a budget (at least one
// question) and says where the list goes on.

import RelayProtocol
import RelayStore

/// A place in a list of questions ordered by when each was first asked (ties by id): the
/// last question a reply held, as the `next` that the following request gives as `after`.
struct PageCursor: Comparable {
    let createdAt: Int64
    let id: QuestionID

    init(_ q: QuestionRecord) {
        createdAt = q.createdAt.milliseconds
        id = q.key
    }

    /// Reads `<milliseconds>:<question id>`, as `text` writes it.
    init?(text: String) {
        let parts = text.split(separator: ":", maxSplits: 1)
        guard parts.count == 2, let at = Int64(parts[0]), let id = QuestionID(String(parts[1])) else { return nil }
        (createdAt, self.id) = (at, id)
    }

    var text: String { "\(createdAt):\(id)" }

    static func < (a: PageCursor, b: PageCursor) -> Bool { (a.createdAt, a.id.high, a.id.low) < (b.createdAt, b.id.high, b.id.low) }
}

extension RelayCore {
    /// The reply to a list request: `questions` in order (`newestFirst`, else oldest first),
    /// from after the request's `after`, at most `limit` and as many as fit in the reply
    /// budget (always one); when more remain, `more` and the `next` to ask for them with.
    func page(_ questions: [QuestionRecord], newestFirst: Bool, limit: Int = .max, _ r: Request) throws(RequestError)
        -> ReplyFields
    {
        var list = questions.map { (PageCursor($0), $0) }.sorted { newestFirst ? $0.0 > $1.0 : $0.0 < $1.0 }
        if let after = try r.optionalString("after") {
            guard let cursor = PageCursor(text: after) else {
                throw RequestError(.badRequest, "\"after\" must be the \"next\" of an earlier reply of this list")
            }
            list.removeAll { newestFirst ? $0.0 >= cursor : $0.0 <= cursor }
        }
        var held: [JSON] = []
        var bytes = 0
        var last: PageCursor?
        for (cursor, q) in list.prefix(limit) {
            var encoded: [UInt8] = []
            appendQuestion(q, to: &encoded)
            guard held.isEmpty || bytes + encoded.count <= config.listReplyBytes else { break }
            bytes += encoded.count
            held.append((try? JSON.parse(encoded)) ?? .null)
            last = cursor
        }
        guard held.count < list.count, let last else { return ["questions": .array(held)] }
        return ["questions": .array(held), "more": true, "next": .string(last.text)]
    }
}
