// A client connection as the loop holds it: its socket, its buffers, its timers, and
// what it is owed.

import RelayCore
import RelayProtocol

extension RelayServer {
    /// A class, so that its buffers are changed in place: a struct copied out of `conns`
    /// shares them, and every append or drain then copied or reallocated a whole buffer.
    final class Conn {
        let id: ConnectionID
        let fd: Int32
        var decoder: FrameDecoder
        var out: [UInt8] = []
        var outStart = 0
        var interest: UInt32 = 0
        let openedAt: Int64
        var lastHeard: Int64
        /// Since when the decoder has held part of a frame (nil when it holds none, or only
        /// whole frames a replay keeps waiting).
        var partSince: Int64?
        var pinged = false
        var closing: CloseReason?
        var closingSince: Int64?
        var peerGone = false
        /// Closed (`closeNow`): what is still queued for it goes nowhere.
        var closed = false
        /// Listed in `touched` during a dispatch.
        var touched = false
        /// Its `hello` succeeded; until then, the bytes it holds as counted in `handshakeInput`,
        /// after, in `input`.
        var greeted = false
        var handshakeCounted = 0
        var inputCounted = 0
        /// Listed in `RelayServer.inputHeld`.
        var heldForInput = false
        /// Another user's, counted in `handshaking` until its hello succeeds.
        var handshakingUser: UInt32?
        /// The member whose session it is, once known.
        var owner: String?
        /// Its unsent bytes as counted in `RelayServer.unsent`.
        var counted = 0
        var pendingBytes: Int { out.count - outStart }
        /// Bytes of replies to its requests not queued in `out` yet (held for a commit).
        var unreleased = 0
        /// Bytes queued in `out`, and sent, since it opened.
        var queuedTotal = 0
        var sentTotal = 0
        /// Bytes of replies queued and not all sent: each batch's, until what was queued up
        /// to its end is sent (the events queued with them are not counted, only waited for).
        var repliesUnsent: [(end: Int, bytes: Int)] = []
        var repliesUnsentHead = 0
        var repliesUnsentBytes = 0
        /// Its requests wait (its socket read up to as much again) until it is owed less than
        /// `RelayServer.inputPauseBytes`.
        var inputPaused = false
        /// What it is owed for its own requests: replies not queued yet, and not sent yet.
        /// (Events from others do not hold its requests back: a guardian behind on questions
        /// still has its answers taken.)
        var owed: Int { unreleased + repliesUnsentBytes }
        /// Its `unreleased` as counted in `RelayServer.held`.
        var heldCounted = 0

        /// Lets go of the replies now sent.
        func repliesSent() {
            while repliesUnsentHead < repliesUnsent.count && repliesUnsent[repliesUnsentHead].end <= sentTotal {
                repliesUnsentBytes -= repliesUnsent[repliesUnsentHead].bytes
                repliesUnsentHead += 1
            }
            if repliesUnsentHead == repliesUnsent.count {
                repliesUnsent.removeAll(keepingCapacity: true)
                repliesUnsentHead = 0
            } else if repliesUnsentHead > 64 && repliesUnsentHead > repliesUnsent.count / 2 {
                repliesUnsent.removeFirst(repliesUnsentHead)
                repliesUnsentHead = 0
            }
        }

        init(id: ConnectionID, fd: Int32, decoder: FrameDecoder, at now: Int64) {
            self.id = id
            self.fd = fd
            self.decoder = decoder
            openedAt = now
            lastHeard = now
        }
    }
}

/// Bytes counted by member and in all.
struct Tally {
    private(set) var total = 0
    private var byMember: [String: Int] = [:]

    subscript(member: String) -> Int { byMember[member, default: 0] }

    /// `member` "" (a connection without a session) counts in all only.
    mutating func add(_ delta: Int, for member: String) {
        total += delta
        guard !member.isEmpty else { return }
        let now = byMember[member, default: 0] + delta
        byMember[member] = now == 0 ? nil : now
    }
}
