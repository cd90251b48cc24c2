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

/// One child's stored questions in list order, read from the archive a chunk at a time.
private struct StoredList {
    let child: Member
    var chunk: [QuestionRecord] = []
    var next = 0
    /// Where the last chunk ended: the next one is read from after it.
    var after: QuestionPlace?
    var exhausted = false
    /// How many the next chunk reads: a few at first, more while they are small
    /// (`RelayCore.pageChunk` at most), fewer when a chunk comes to more than a reply holds.
    var size = 8
}

extension RelayCore {
    /// Questions read from the archive at a time at most, per child, while a page is filled.
    static let pageChunk = 64

    /// A page's questions in list order, merged from the held ones and each child's stored
    /// ones (a held record standing in for a stored one): as many as `limit` and about
    /// the reply budget take; and whether the list goes on past them. The stored ones are
    /// read a chunk at a time, only as far as the page goes: a child's whole history,
    /// avatars and all, is never read for one page.
    private func candidates(
        of children: [Member], status: QuestionStatus?, newestFirst: Bool, after: QuestionPlace?, limit: Int
    ) throws(RequestError) -> (questions: [QuestionRecord], more: Bool) {
        func inOrder(_ a: QuestionPlace, _ b: QuestionPlace) -> Bool { newestFirst ? a > b : a < b }
        var held: [QuestionRecord] = []
        for child in children {
            for key in child.held {
                guard let q = questions[key], status == nil || q.status == status else { continue }
                if let after, !inOrder(after, QuestionPlace(q)) { continue }
                held.append(q)
            }
        }
        held.sort { inOrder(QuestionPlace($0), QuestionPlace($1)) }
        // Pending questions are all held.
        var stored = status == .pending ? [] : children.map { StoredList(child: $0, after: after) }
        var nextHeld = 0
        var out: [QuestionRecord] = []
        var bytes = 0
        while true {
            var best: QuestionRecord?
            var from = -1  // which stored list, or -1: the held ones
            if nextHeld < held.count { best = held[nextHeld] }
            for i in stored.indices {
                while stored[i].next == stored[i].chunk.count && !stored[i].exhausted { try readChunk(&stored[i], status, newestFirst) }
                guard stored[i].next < stored[i].chunk.count else { continue }
                let q = stored[i].chunk[stored[i].next]
                if best.map({ inOrder(QuestionPlace(q), QuestionPlace($0)) }) ?? true { (best, from) = (q, i) }
            }
            guard let q = best else { return (out, false) }
            // Full: by the limit, or by about the budget (the reply checks it exactly).
            if out.count >= limit || (!out.isEmpty && bytes > config.listReplyBytes) { return (out, true) }
            if from < 0 { nextHeld += 1 } else { stored[from].next += 1 }
            out.append(q)
            bytes += q.content.encoded.count + 200
        }
    }

    /// The next chunk of a child's stored questions, without those the core holds.
    private func readChunk(_ list: inout StoredList, _ status: QuestionStatus?, _ newestFirst: Bool) throws(RequestError) {
        let read: [QuestionRecord]
        do {
            read = try archive.questions(
                of: list.child.id, status: status, newestFirst: newestFirst, after: list.after, limit: list.size)
        } catch {
            throw Self.readFailure("\(list.child.id)'s questions", error)
        }
        list.exhausted = read.count < list.size
        // Questions of a megabyte (avatars, long names) are read about as many as a reply holds.
        let bytes = read.reduce(0) { $0 + $1.content.encoded.count }
        list.size = bytes >= config.listReplyBytes ? max(1, list.size / 2) : min(Self.pageChunk, list.size * 2)
        list.after = read.last.map(QuestionPlace.init) ?? list.after
        list.chunk = read.filter { !list.child.held.contains($0.key) }
        list.next = 0
    }

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
        let (list, more) = try candidates(of: children, status: status, newestFirst: newestFirst, after: after, limit: limit)
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
            guard held < list.count || more, let last else { return }
            out.appendJSONKey("more")
            out.append(literal: "true")
            out.appendJSONField("next", PageCursor.text(QuestionPlace(last)))
        }
        return .frame(frame)
    }
}
