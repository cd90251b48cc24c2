// An in-memory store for fast core and server tests: the same contract as the SQLite
// store, nothing durable. A commit is `StoreSnapshot.apply` of its changes.

import RelayModel
import RelayProtocol
import Synchronization

public final class MemoryStore: RelayStore, Sendable {
    private struct State {
        var snapshot = StoreSnapshot()
        var streams: [String: [EventRecord]] = [:]
        var commits = 0
    }

    private let state = Mutex(State())

    public init() {}

    /// How many commits carried changes.
    public var commits: Int { state.withLock { $0.commits } }

    public func load() throws -> StoreSnapshot { state.withLock { $0.snapshot } }

    public func commit(_ changes: [Change]) throws {
        guard !changes.isEmpty else { return }
        state.withLock { s in
            for c in changes {
                s.snapshot.apply(c)
                if case .event(let e) = c { s.streams[e.member, default: []].append(e) }
            }
            s.commits += 1
        }
    }

    public func events(member: String, after seq: Int64, limit: Int) throws -> [EventRecord] {
        state.withLock { Array(($0.streams[member] ?? []).lazy.filter { $0.seq > seq }.prefix(limit)) }
    }

    /// The memory store drops what may go whatever its position: there is no later pass to wait for.
    public var eventPosition: Int64 { 0 }

    public func prune(olderThan cutoff: Timestamp, acknowledged: [String: Int64], settledThrough: Int64, limit: Int) throws
        -> PruneStep
    {
        state.withLock { s in
            var through: [String: Int64] = [:]
            var budget = limit
            for (member, list) in s.streams where budget > 0 {
                // As far as the stored cursors say, too (see `RelayStore.prune`).
                let stored = s.snapshot.sessions.filter { $0.member == member }.map(\.cursor).min() ?? 0
                let upTo = min(acknowledged[member] ?? 0, stored)
                let dropped = list.prefix { ($0.at < cutoff || $0.seq <= upTo) }.prefix(budget)
                guard let last = dropped.last else { continue }
                budget -= dropped.count
                s.streams[member] = Array(list.dropFirst(dropped.count))
                s.snapshot.firstRetained[member] = s.streams[member]?.first?.seq
                through[member] = last.seq
            }
            return PruneStep(through: through, more: budget <= 0)
        }
    }
}
