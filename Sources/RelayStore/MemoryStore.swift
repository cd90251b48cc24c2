// An in-memory store for fast core and server tests: the same contract as the SQLite
// store, nothing durable. A commit is `StoreSnapshot.apply` of its changes; a commit can
// be made to fail, as a full disk would.

import RelayModel
import RelayProtocol

public final class MemoryStore: RelayStore {
    private var snapshot = StoreSnapshot()
    private var streams: [String: [EventRecord]] = [:]
    /// How many commits carried changes.
    public private(set) var commits = 0
    /// While set, every commit fails with it and keeps nothing.
    public var failCommits: (any Error)?

    public init() {}

    public func load() throws -> StoreSnapshot { snapshot }

    public func commit(_ changes: [Change]) throws {
        guard !changes.isEmpty else { return }
        if let failCommits { throw failCommits }
        for c in changes {
            snapshot.apply(c)
            if case .event(let e) = c { streams[e.member, default: []].append(e) }
        }
        commits += 1
    }

    public func events(member: String, after seq: Int64, limit: Int) throws -> [EventRecord] {
        Array((streams[member] ?? []).lazy.filter { $0.seq > seq }.prefix(limit))
    }

    public func prune(olderThan cutoff: Timestamp, acknowledged: [String: Int64], limit: Int) throws -> [String: Int64] {
        var through: [String: Int64] = [:]
        var budget = limit
        for (member, list) in streams where budget > 0 {
            let upTo = acknowledged[member] ?? 0
            let dropped = list.prefix { ($0.at < cutoff || $0.seq <= upTo) }.prefix(budget)
            guard let last = dropped.last else { continue }
            budget -= dropped.count
            streams[member] = Array(list.dropFirst(dropped.count))
            snapshot.firstRetained[member] = streams[member]?.first?.seq
            through[member] = last.seq
        }
        return through
    }
}
