// `permission-relay backup`, `restore` and `check`: the store on disk, without the
// socket. Backup and check work beside a running relay; restore needs it stopped.

import CLISupport
import Foundation
import Glibc
import RelayServer
import RelayStore

struct StoreCommand: Sendable {
    let name: String
    let usage: String
    let run: @Sendable ([String]) throws -> Void

    static let all: [StoreCommand] = [backup, restore, check]

    private static let dataOption = """
          --data DIR   The relay's data directory (default: \(Paths.defaultData))
          -h, --help   Show this help.
        """

    static let backup = StoreCommand(
        name: "backup",
        usage: """
            OVERVIEW: Copy the relay's store into one file, consistent as of one moment, while the
            relay runs (SQLite's online backup). The file is a complete store: restore it with
            `permission-relay restore`.

            USAGE: permission-relay backup DEST [--data DIR]

            OPTIONS:
            \(dataOption)

            EXAMPLES:
              permission-relay backup ~/relay-backup-$(date +%F).db
            """,
        run: { args in
            umask(0o077)  // a backup holds what the store does, and is as private
            let (dest, data) = try fileAndData(args, "DEST")
            do {
                try SQLiteStore.backup(databaseAt: Paths.canonical(data) + "/relay.db", to: dest)
            } catch {
                let folder = (dest as NSString).deletingLastPathComponent
                if Store.diskFull(error, data: folder.isEmpty ? "." : folder) {
                    throw CLIError.failure("backup failed: the disk holding \(dest) is full; free some space there, or back up elsewhere")
                }
                if let damage = Store.damage(error, file: Paths.canonical(data) + "/relay.db") {
                    throw CLIError.failure(
                        "backup failed: \(damage): see what is wrong with `permission-relay check --data \(data)`, and restore an"
                            + " earlier backup (permission-relay restore)")
                }
                throw CLIError.failure("backup failed: \(error)")
            }
            printOut("backed up \(data)/relay.db to \(dest)")
        })

    static let restore = StoreCommand(
        name: "restore",
        usage: """
            OVERVIEW: Put a backup in place as the relay's store. Stop the relay first; the store
            it replaces (its database, WAL, and an older relay's journals) is kept beside it as
            relay.db.replaced (relay.db.replaced.2, and so on, when an earlier restore kept one).
            Everything up to the backup is there when the relay starts again; clients resume from
            it.

            USAGE: permission-relay restore BACKUP [--data DIR]

            OPTIONS:
            \(dataOption)

            EXAMPLES:
              permission-relay restore ~/relay-backup-2026-12-01.db
            """,
        run: { args in
            umask(0o077)  // the store put in place, as private as the relay makes its own
            let (backup, given) = try fileAndData(args, "BACKUP")
            let isNew = access(given, F_OK) != 0
            let data = try Paths.makePrivateDirectory(given, owner: Paths.storeCommandOwner)
            try Paths.checkStoreFiles(in: data, owner: Paths.storeCommandOwner)
            let lock = try Serve.lockDataDirectory(data)
            defer { close(lock) }
            let kept: [String]
            do {
                kept = try SQLiteStore.restore(backup: backup, to: data + "/relay.db")
            } catch {
                throw CLIError.failure("restore failed: \(error)")
            }
            // Root restoring the store of a relay that runs as another user gives it that user's.
            var st = stat()
            if geteuid() == 0, stat(data, &st) == 0, st.st_uid != 0 { Paths.giveStoreFiles(in: data, to: st.st_uid, group: st.st_gid) }
            // A data directory made now may be a mistyped one: the relay must be told of it.
            let serve = isNew ? " (permission-relay serve --data \(data))" : ""
            printOut(
                "restored \(backup) into \(data)/relay.db\(isNew ? ", a new data directory" : "")"
                    + "\(kept.isEmpty ? "" : " (what it replaced is kept: \(kept.joined(separator: ", ")))"); start the relay to serve it\(serve)"
            )
        })

    /// The one file a command names, and its data directory (`--data`, else the default).
    private static func fileAndData(_ args: [String], _ name: String) throws -> (file: String, data: String) {
        let a = try Arguments(args, valueFlags: ["--data"], switchFlags: [])
        let file = try a.expectPositionals([name])[0]
        guard !file.isEmpty else { throw CLIError.usage("\(name) needs a path, not an empty one") }
        return (file, a.value("--data") ?? Paths.defaultData)
    }

    static let check = StoreCommand(
        name: "check",
        usage: """
            OVERVIEW: Check the relay's store, or a backup of it: SQLite's integrity check, then the
            relay's own rules (each member's events without holes, cursors not past their stream,
            every question readable and its child known). Exits 0 when all is well, 1 with what is
            wrong.

            USAGE: permission-relay check [BACKUP] [--data DIR]

            OPTIONS:
            \(dataOption)

            EXAMPLES:
              permission-relay check
              permission-relay check --data /var/lib/permission-relay
              permission-relay check ~/relay-backup-2026-12-01.db
            """,
        run: { args in
            let a = try Arguments(args, valueFlags: ["--data"], switchFlags: [])
            guard a.positionals.count <= 1 else { throw CLIError.usage("check takes one BACKUP at most") }
            if a.positionals.count == 1 && a.value("--data") != nil {
                throw CLIError.usage("give a BACKUP to check, or --data DIR, not both")
            }
            let data = a.value("--data") ?? Paths.defaultData
            var isDirectory: ObjCBool = false
            if a.value("--data") != nil, FileManager.default.fileExists(atPath: data, isDirectory: &isDirectory), !isDirectory.boolValue {
                throw CLIError.usage(
                    "--data takes the relay's data directory; to check a backup file, give it: permission-relay check \(data)")
            }
            if let backup = a.positionals.first, FileManager.default.fileExists(atPath: backup, isDirectory: &isDirectory),
                isDirectory.boolValue
            {
                throw CLIError.usage(
                    "\(backup) is a directory; to check a data directory, give it with --data: permission-relay check --data \(backup)")
            }
            let file = a.positionals.first ?? Paths.canonical(data) + "/relay.db"
            let findings: [String]
            do {
                findings = try SQLiteStore.check(databaseAt: file)
            } catch let older as SQLiteStore.OlderSchema where !a.positionals.isEmpty {
                // A backup taken before an upgrade: as far as it can be checked before a restore upgrades it.
                return printOut(
                    "\(file): ok as far as SQLite's integrity check goes; it is an older relay's store (schema \(older.version)),"
                        + " which restore upgrades: check the store once the relay has started on it")
            } catch {
                let folder = (file as NSString).deletingLastPathComponent
                if Store.diskFull(error, data: folder.isEmpty ? "." : folder) {
                    throw CLIError.failure("cannot check \(file): the disk is full; free some space and check again")
                }
                if let damage = Store.damage(error, file: file) {
                    let what = a.positionals.isEmpty ? "restore a backup (permission-relay restore)" : "use another backup"
                    throw CLIError.failure("\(damage): \(what), or keep it for inspection")
                }
                throw CLIError.failure("cannot check \(file): \(error)")
            }
            guard findings.isEmpty else {
                for f in findings { printErr("permission-relay: \(f)") }
                let what = a.positionals.isEmpty ? "restore a backup (permission-relay restore)" : "use another backup"
                throw CLIError.failure(
                    "\(file): \(findings.count) problem\(findings.count == 1 ? "" : "s") found; \(what) or keep the store for inspection")
            }
            printOut("\(file): ok")
        })
}

enum Store {
    /// Why the store in `data` could not be opened, and what to do.
    static func openingFailure(_ error: any Error, data: String) -> String {
        if let e = error as? SQLiteError, e.isDamaged {
            return "the store \(data)/relay.db is damaged or is not the relay's (\(e.message)): restore a backup with"
                + " `permission-relay restore BACKUP`, see what is wrong with `permission-relay check`, or move the"
                + " directory aside to start with an empty store"
        }
        if diskFull(error, data: data) {
            return "cannot open the store in \(data): the disk is full; free some space and start again"
        }
        return "cannot open the store in \(data): \(error)"
    }

    /// What `error` says of the database `file` when SQLite found it damaged, or not a
    /// relay's store at all (no schema of the relay's); nil for any other error.
    static func damage(_ error: any Error, file: String) -> String? {
        guard let e = error as? SQLiteError else { return nil }
        if e.isDamaged { return "\(file) is damaged or is not the relay's store (\(e.message))" }
        if e.message.hasPrefix("no such table") { return "\(file) holds no relay's store (\(e.message))" }
        return nil
    }

    /// Whether `error` is SQLite's for a full disk, or the I/O error it gives when the WAL's
    /// index cannot be given its size (SQLITE_IOERR_SHMSIZE) because the disk holding
    /// `data` is full.
    static func diskFull(_ error: any Error, data: String) -> Bool {
        guard let e = error as? SQLiteError else { return false }
        return e.isFull || (e.code == 4874 && (DiskSpace.of(data).map { $0.available < 1 << 20 } ?? false))
    }
}
