// Timers of the rules (§7, §8): pending questions whose expirationDate passed, and
// timed approvals running out. Deadlines sit in heaps; a popped entry is checked
// against the current state, so re-asks and renewals need no removal.

import RelayProtocol
import RelayModel

extension RelayCore {
    /// Runs every rule whose time has come; call when `nextDeadline` passes.
    public func tick(now: Timestamp) {
        expireDue(now: now)
        flushDeferred()
    }

    /// The earliest instant at which `tick` has work to do.
    public var nextDeadline: Timestamp? {
        switch (questionDeadlines.top?.at, knownDeadlines.top?.at) {
        case (let a?, let b?): return min(a, b)
        case (let a, let b): return a ?? b
        }
    }

    /// Files the expiry of a question asked. The deadlines of questions answered, cancelled
    /// or forgotten before they expire are dropped from the heap as it grows, not one by one.
    func addDeadline(_ at: Timestamp, of key: QuestionID) {
        questionDeadlines.push((at, key)) { d in
            guard let entry = questions.entry(d.id) else { return false }
            return entry.record.status == .pending && entry.record.content.expiration == d.at
        }
    }

    /// Files when a timed approval of `handle` runs out; renewed ones' older deadlines go likewise.
    func addDeadline(_ at: Timestamp, child: Member, handle: NormalizedHandle) {
        knownDeadlines.push((at, child, handle)) { d in d.child.known[d.handle]?.until == d.at }
    }

    func expireDue(now: Timestamp) {
        while let top = questionDeadlines.top, top.at <= now {
            _ = questionDeadlines.pop()
            guard let q = questions[top.id], q.status == .pending, let e = q.content.expiration, e <= now else { continue }
            // Linked to a hub, the first decision there wins: an answer may have come first.
            if hubLinked(q.family) { proposeExpiry(q, now: now) } else { close(question: q, reason: .expired, now: now) }
        }
        // Handles one approval made known together run out together: one event per child says so.
        var lapsed: [(child: Member, handles: [NormalizedHandle])] = []
        while let top = knownDeadlines.top, top.at <= now {
            _ = knownDeadlines.pop()
            let child = top.child
            guard var entry = child.known[top.handle], let until = entry.until, until <= now else { continue }
            entry.until = nil
            if entry.permanent {
                child.known[top.handle] = entry
                persist(.knownHandle(entry.record(child: child, handle: top.handle)))
            } else {
                child.known[top.handle] = nil
                persist(.unknownHandle(entry.record(child: child, handle: top.handle)))
                if let i = lapsed.firstIndex(where: { $0.child === child }) {
                    lapsed[i].handles.append(top.handle)
                } else {
                    lapsed.append((child, [top.handle]))
                }
            }
        }
        for l in lapsed { announceKnown(child: l.child, added: [], removed: l.handles, now: now) }
    }
}
