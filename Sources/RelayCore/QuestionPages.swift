// Lists of questions (`pending`, `history`, `questions`) in replies of bounded size. A
// child's questions may each carry an avatar of up to 256 KiB: all of them in one reply
// could outgrow what the relay lets a connection hold unsent, and it would drop the
// guardian asking, again at every try. A reply holds what fits in a budget (at least one
// question) and says where the list goes on.

import RelayProtocol
import RelayModel

/// Where a question stands in a list: by when it was first asked, ties in the order the
/// relay took them.
struct PageKey: Comparable {
    let createdAt: Int64
    let order: Int64

    static func < (a: PageKey, b: PageKey) -> Bool { (a.createdAt, a.order) < (b.createdAt, b.order) }
}

/// The last question a reply held, as the `next` that the following request gives as
/// `after`: `<milliseconds>:<question id>`.
struct PageCursor {
    let createdAt: Int64
    let id: QuestionID

    init(createdAt: Int64, id: QuestionID) {
        (self.createdAt, self.id) = (createdAt, id)
    }

    init?(text: String) {
        let parts = text.split(separator: ":", maxSplits: 1)
        guard parts.count == 2, let at = Int64(parts[0]), let id = QuestionID(String(parts[1])) else { return nil }
        (createdAt, self.id) = (at, id)
    }

    var text: String { "\(createdAt):\(id)" }
}

extension RelayCore {
    /// The reply to a list request: the questions of `keys` that `include` takes, in order
    /// (`newestFirst`, else oldest first), from after the request's `after`, at most `limit`
    /// and as many as fit in the reply budget (always one); when more remain, `more` and
    /// the `next` to ask for them with.
    func page(
        _ keys: some Sequence<QuestionID>, newestFirst: Bool, limit: Int = .max, _ r: Request,
        where include: (QuestionRecord) -> Bool
    ) throws(RequestError) -> ReplyFields {
        var list: [(key: PageKey, entry: QuestionTable.Entry)] = []
        for id in keys {
            guard let entry = questions.entry(id), include(entry.record) else { continue }
            list.append((PageKey(createdAt: entry.record.createdAt.milliseconds, order: entry.order), entry))
        }
        list.sort { newestFirst ? $0.key > $1.key : $0.key < $1.key }
        if let after = try r.optionalString("after") {
            guard let cursor = PageCursor(text: after) else {
                throw RequestError(.badRequest, "\"after\" must be the \"next\" of an earlier reply of this list")
            }
            // A question no longer remembered stands after every other asked in its millisecond.
            let at = PageKey(
                createdAt: cursor.createdAt, order: questions.entry(cursor.id)?.order ?? (newestFirst ? .min : .max))
            list.removeAll { newestFirst ? $0.key >= at : $0.key <= at }
        }
        // Written straight into the reply, each question spliced from its stored bytes: a page
        // parsed back into values and encoded again held every client up for tens of ms.
        var held = 0
        var last: QuestionRecord?
        let frame = okFrame(re: r.id, capacity: min(config.listReplyBytes, 1 << 20) + 256) { out in
            out.appendJSONKey("questions")
            out.append(UInt8(ascii: "["))
            let start = out.count
            for (_, entry) in list.prefix(limit) {
                let before = out.count
                if held > 0 { out.append(UInt8(ascii: ",")) }
                appendQuestion(entry.record, to: &out)
                guard held == 0 || out.count - start <= config.listReplyBytes else {
                    out.removeSubrange(before...)
                    break
                }
                held += 1
                last = entry.record
            }
            out.append(UInt8(ascii: "]"))
            guard held < list.count, let last else { return }
            out.appendJSONKey("more")
            out.append(literal: "true")
            out.appendJSONField("next", PageCursor(createdAt: last.createdAt.milliseconds, id: last.key).text)
        }
        return .frame(frame)
    }
}
