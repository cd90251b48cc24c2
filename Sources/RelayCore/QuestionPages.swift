// Lists of questions (`pending`, `history`, `questions`) in replies of bounded size. A
// child's questions may each carry an avatar of up to 256 KiB: all of them in one reply
// could outgrow what the relay lets a connection hold unsent, and it would drop the
// guardian asking, again at every try. A reply holds what fits in a budget (at least one
// question) and says where the list goes on.

import RelayProtocol
import RelayModel

/// The place of the last question a reply held, as the `next` that the following request
/// gives as `after`: `<milliseconds>:<row>`. The place itself, not the question: that one
/// may be forgotten before the next page is asked for. (Relays before kept
/// `<milliseconds>:<question id>`, which is still taken.)
enum PageCursor {
    case place(QuestionPlace)
    case question(createdAt: Int64, id: QuestionID)

    init?(text: String) {
        let parts = text.split(separator: ":", maxSplits: 1)
        guard parts.count == 2, let at = Int64(parts[0]) else { return nil }
        if let row = Int64(parts[1]) {
            self = .place(QuestionPlace(createdAt: at, row: row))
        } else if let id = QuestionID(String(parts[1])) {
            self = .question(createdAt: at, id: id)
        } else {
            return nil
        }
    }

    static func text(_ place: QuestionPlace) -> String { "\(place.createdAt):\(place.row)" }
}

extension RelayCore {
    /// Questions of a child's `questions` list one reply holds at most: the list is read
    /// from the store, and a child may have thousands.
    static let questionsPerReply = 1000

    /// The reply to a list request: the questions of `children` (only those with `status`
    /// when given) in order (`newestFirst`, else oldest first), from after the request's
    /// `after`, at most `limit` and as many as fit in the reply budget (always one); when
    /// more remain, `more` and the `next` to ask for them with. Pending questions are all
    /// held; the others are read from the archive, where a held one's record stands in for
    /// a stored one (it may be newer).
    func page(
        of children: [Member], status: QuestionStatus?, newestFirst: Bool, limit: Int = .max, _ r: Request
    ) throws(RequestError) -> ReplyFields {
        var after: QuestionPlace?
        if let text = try r.optionalString("after") {
            switch PageCursor(text: text) {
            case .place(let place)?: after = place
            case .question(let createdAt, let id)?:
                // A question no longer stored stands after every other asked in its millisecond.
                after = QuestionPlace(createdAt: createdAt, row: try question(id)?.row ?? (newestFirst ? .min : .max))
            case nil: throw RequestError(.badRequest, "\"after\" must be the \"next\" of an earlier reply of this list")
            }
        }
        func inOrder(_ a: QuestionPlace, _ b: QuestionPlace) -> Bool { newestFirst ? a > b : a < b }
        var list: [QuestionRecord] = []
        for child in children {
            for key in child.held {
                guard let q = questions[key], status == nil || q.status == status else { continue }
                if let after, !inOrder(after, QuestionPlace(q)) { continue }
                list.append(q)
            }
            guard status != .pending else { continue }
            // Enough to fill the page even where held questions stand in for stored ones.
            let wanted = min(limit, 100_000) + child.held.count + 1
            let stored: [QuestionRecord]
            do {
                stored = try archive.questions(of: child.id, status: status, newestFirst: newestFirst, after: after, limit: wanted)
            } catch {
                throw RequestError(.busy, "could not read \(child.id)'s questions from the store (\(error)); try again")
            }
            list += stored.lazy.filter { !child.held.contains($0.key) }
        }
        list.sort { inOrder(QuestionPlace($0), QuestionPlace($1)) }
        // Written straight into the reply, each question spliced from its stored bytes: a page
        // parsed back into values and encoded again held every client up for tens of ms.
        var held = 0
        var last: QuestionRecord?
        let frame = okFrame(re: r.id, capacity: min(config.listReplyBytes, 1 << 20) + 256) { out in
            out.appendJSONKey("questions")
            out.append(UInt8(ascii: "["))
            let start = out.count
            for q in list.prefix(limit) {
                let before = out.count
                if held > 0 { out.append(UInt8(ascii: ",")) }
                appendQuestion(q, to: &out)
                guard held == 0 || out.count - start <= config.listReplyBytes else {
                    out.removeSubrange(before...)
                    break
                }
                held += 1
                last = q
            }
            out.append(UInt8(ascii: "]"))
            guard held < list.count, let last else { return }
            out.appendJSONKey("more")
            out.append(literal: "true")
            out.appendJSONField("next", PageCursor.text(QuestionPlace(last)))
        }
        return .frame(frame)
    }
}
