// The store as the people who run the relay handle it, with the release binary: a
// backup taken while it serves, checked and restored; and a data directory of the
// relay that kept journals beside its database, taken over at the first start.

import Foundation
import RelayProtocol
import XCTest

final class StoreCommandTests: XCTestCase {
    func testABackupTakenWhileServingIsCheckedAndRestoresEverythingUpToIt() throws {
        let umaskBefore = umask(0o022)  // files others may read, unless the relay says otherwise
        defer { umask(umaskBefore) }
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let child = try relay.connect()
        _ = try child.hello("c0", tokens["c0"]!)
        let before = (0..<3).map { _ in UUID().uuidString }
        for id in before { XCTAssertEqual(try child.request(["type": "ask", "question": question(id)])["type"]?.string, "ok") }

        let backup = relay.data + "-backup.db"
        defer { try? FileManager.default.removeItem(atPath: backup) }
        let b = runRelay(["backup", backup, "--data", relay.data])
        XCTAssertEqual(b.status, 0, b.stderr)
        XCTAssertEqual(try mode(of: backup), 0o600, "as private as the store")
        XCTAssertEqual(runRelay(["backup", backup, "--data", relay.data]).status, 1, "never over an existing file")
        XCTAssertEqual(try child.request(["type": "ask", "question": question()])["type"]?.string, "ok")  // after the backup

        let check = runRelay(["check", "--data", relay.data])
        XCTAssertEqual(check.status, 0, check.stderr)
        XCTAssertTrue(check.stdout.hasSuffix(": ok\n"), check.stdout)
        // A backup is checked as it is, before it is needed.
        XCTAssertEqual(runRelay(["check", backup]).stdout, "\(backup): ok\n")
        // One an older relay took (its last schema step undone here) is checked as far as it can be.
        let older = relay.dir.appendingPathComponent("older.db").path
        try FileManager.default.copyItem(atPath: backup, toPath: older)
        execSQL("DELETE FROM migrations WHERE version = (SELECT max(version) FROM migrations)", in: older)
        let olderChecked = runRelay(["check", older])
        XCTAssertEqual(olderChecked.status, 0, olderChecked.stderr)
        XCTAssertTrue(
            olderChecked.stdout.contains("ok as far as SQLite's integrity check goes; it is an older relay's store"), olderChecked.stdout)
        let misread = runRelay(["check", "--data", backup])
        XCTAssertEqual(misread.status, 64)
        XCTAssertTrue(misread.stderr.contains("to check a backup file, give it: permission-relay check \(backup)"), misread.stderr)
        let directory = runRelay(["check", relay.data])
        XCTAssertEqual(directory.status, 64)
        XCTAssertTrue(
            directory.stderr.contains("to check a data directory, give it with --data: permission-relay check --data \(relay.data)"),
            directory.stderr)
        // Restored into a directory that is not there yet (a typo, maybe): it says how to serve it.
        let elsewhere = relay.dir.appendingPathComponent("elsewhere").path
        let fresh = runRelay(["restore", backup, "--data", elsewhere])
        XCTAssertEqual(fresh.status, 0, fresh.stderr)
        XCTAssertTrue(
            fresh.stdout.contains("a new data directory; start the relay to serve it (permission-relay serve --data \(elsewhere))"),
            fresh.stdout)
        let refused = runRelay(["restore", backup, "--data", relay.data])
        XCTAssertEqual(refused.status, 1)
        XCTAssertTrue(refused.stderr.contains("a relay is already serving the data directory \(relay.data); stop it first"), refused.stderr)

        XCTAssertEqual(relay.terminate(), 0)
        let r = runRelay(["restore", backup, "--data", relay.data])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(try mode(of: relay.data + "/relay.db"), 0o600)
        try relay.start()
        let guardian = try relay.connect()
        _ = try guardian.hello("g0", tokens["g0"]!)
        let pending = try guardian.request(["type": "pending"])["questions"]?.array?.compactMap { $0["id"]?.string }
        XCTAssertEqual(Set(pending ?? []), Set(before), "what was there at the backup, and nothing after")
        // The guardian's stream had given seq 4 (the ask after the backup) to an app that
        // processed it. That app resumes: told of the gap, it is handed the next event,
        // which never takes a seq given before. One that had processed only seq 1 is
        // handed the backup's events after it, then the next.
        let app = try relay.connect()
        let welcome = try app.hello("g0", tokens["g0"]!, session: "tablet", resume: 4)
        XCTAssertEqual(welcome["gap"]?.bool, true, "\(JSON.object(welcome).text)")
        let behind = try relay.connect()
        let behindWelcome = try behind.hello("g0", tokens["g0"]!, session: "phone", resume: 1)
        XCTAssertNil(behindWelcome["gap"], "\(JSON.object(behindWelcome).text)")
        let asker = try relay.connect()
        _ = try asker.hello("c0", tokens["c0"]!)
        XCTAssertEqual(try asker.request(["type": "ask", "question": question()])["type"]?.string, "ok")
        let seq = try XCTUnwrap(app.event("question")["seq"]?.int)
        XCTAssertGreaterThan(seq, 4, "a seq given before the restore is given again")
        let replayed = try (0..<3).map { _ in try XCTUnwrap(behind.event("question")["seq"]?.int) }
        XCTAssertEqual(replayed, [2, 3, seq], "the backup's events after seq 1, then the next")
    }

    func testAStoreOthersMayReadIsMadePrivateAtStart() throws {
        let relay = try RelayProcess()
        try relay.start()
        _ = try relay.provision(families: 1)
        XCTAssertEqual(relay.terminate(), 0)
        XCTAssertEqual(chmod(relay.data + "/relay.db", 0o644), 0)  // copied into place by hand, say
        try relay.start()
        XCTAssertEqual(try mode(of: relay.data + "/relay.db"), 0o600)
        XCTAssertEqual(try mode(of: relay.data + "/relay.db-wal"), 0o600, "SQLite gives the WAL the database's mode")
    }

    /// Root restoring the store of a relay that runs as a user of its own gives that user the
    /// files it made, the lock included (or that relay could not start).
    func testRootRestoringAnotherUsersStoreGivesThatUserItsFiles() throws {
        guard geteuid() == 0 else { throw XCTSkip("restoring as root for another user needs root (CI runs as root)") }
        let relay = try RelayProcess()
        try relay.start()
        _ = try relay.provision(families: 1)
        let backup = relay.dir.appendingPathComponent("backup.db").path
        XCTAssertEqual(runRelay(["backup", backup, "--data", relay.data]).status, 0)
        XCTAssertEqual(relay.terminate(), 0)
        let nobody: uid_t = 65534
        try FileManager.default.removeItem(atPath: relay.data + "/relay.lock")
        for path in [relay.data] + (try FileManager.default.contentsOfDirectory(atPath: relay.data)).map({ relay.data + "/" + $0 }) {
            XCTAssertEqual(chown(path, nobody, nobody), 0, path)
        }
        let r = runRelay(["restore", backup, "--data", relay.data])
        XCTAssertEqual(r.status, 0, r.stderr)
        for name in ["relay.db", "relay.lock"] {
            XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: relay.data + "/" + name)[.ownerAccountID] as? Int, 65534, name)
        }
    }

    private func mode(of path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1
    }

    func testCheckReportsADamagedStoreAndExitsOne() throws {
        let relay = try RelayProcess()
        try relay.start()
        _ = try relay.provision(families: 1)
        XCTAssertEqual(relay.terminate(), 0)
        let db = relay.data + "/relay.db"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: db))
        for i in stride(from: 4096 + 100, to: min(bytes.count, 3 * 4096), by: 7) { bytes[i] ^= 0xA5 }  // pages past the header
        try bytes.write(to: URL(fileURLWithPath: db))
        let check = runRelay(["check", "--data", relay.data])
        XCTAssertEqual(check.status, 1)
        XCTAssertTrue(check.stderr.contains("permission-relay: SQLite: "), check.stderr)
        XCTAssertTrue(check.stderr.contains("problem found; restore a backup"), check.stderr)
    }

    /// Backup, check and restore name what is wrong with the file they were given, and what
    /// to do: a link in place of the store, a store this user may not read, a damaged backup,
    /// and one of a newer relay (which a start would refuse once it was in place).
    func testStoreCommandsSayWhatIsWrongWithTheirFiles() throws {
        let relay = try RelayProcess()
        try relay.start()
        _ = try relay.provision(families: 1)
        XCTAssertEqual(relay.terminate(), 0)
        let work = relay.data + "-work"
        try FileManager.default.createDirectory(atPath: work + "/linked", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: work) }

        XCTAssertEqual(symlink(relay.data + "/relay.db", work + "/linked/relay.db"), 0)
        for command in [["check"], ["backup", work + "/b0.db"]] {
            let r = runRelay(command + ["--data", work + "/linked"])
            XCTAssertEqual(r.status, 1, "\(command)")
            XCTAssertTrue(r.stderr.contains("relay.db is not a regular file (a link is never followed)"), r.stderr)
        }
        if geteuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") {
            for command in [["check"], ["backup", "/tmp/b-\(UUID().uuidString.prefix(8)).db"]] {
                let r = runRelay(command + ["--data", relay.data], asUser: 65534)
                XCTAssertEqual(r.status, 1, "\(command)")
                XCTAssertTrue(r.stderr.contains("relay.db: permission denied; run this as the relay's user"), r.stderr)
            }
        }

        let backup = work + "/b1.db"
        XCTAssertEqual(runRelay(["backup", backup, "--data", relay.data]).status, 0)
        let damaged = work + "/damaged.db"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: backup))
        for i in 4096..<min(bytes.count, 3 * 4096) { bytes[i] = 0x5A }  // past the header page
        try bytes.write(to: URL(fileURLWithPath: damaged))
        var r = runRelay(["restore", damaged, "--data", relay.data])
        XCTAssertEqual(r.status, 1)
        XCTAssertTrue(r.stderr.contains("\(damaged) is not a backup of a relay's store, or a damaged one"), r.stderr)

        execSQL("INSERT INTO migrations(version, name, appliedAt) VALUES(999, 'from the future', 0)", in: backup)
        r = runRelay(["restore", backup, "--data", relay.data])
        XCTAssertEqual(r.status, 1)
        XCTAssertTrue(r.stderr.contains("\(backup) has schema version 999, newer than this relay knows"), r.stderr)
        try relay.start()  // the store was left as it was
    }

    /// A row a start cannot read (a role, a handle's kind, its actions) fails `check` as it
    /// fails the start: a store that checks out is one that starts.
    func testCheckRefusesWhatAStartRefuses() throws {
        let relay = try RelayProcess()
        try relay.start()
        let tokens = try relay.provision(families: 1)
        let child = try relay.connect()
        _ = try child.hello("c0", tokens["c0"]!)
        XCTAssertEqual(try child.request(["type": "ask", "question": question()])["type"]?.string, "ok")
        XCTAssertEqual(relay.terminate(), 0)
        func sql(_ statement: String) { execSQL(statement, in: relay.data + "/relay.db") }
        for (damage, repair, said) in [
            (
                "UPDATE members SET role = 'wizard' WHERE id = 'g0'", "UPDATE members SET role = 'guardian' WHERE id = 'g0'",
                "a stored member g0 cannot be read"
            ),
            ("UPDATE questions SET id = 'not-a-uuid'", "", "a stored question id not-a-uuid cannot be read"),
        ] {
            sql(damage)
            let check = runRelay(["check", "--data", relay.data])
            XCTAssertEqual(check.status, 1, check.stdout)
            XCTAssertTrue(check.stderr.contains(said + " (a start refuses the store)"), check.stderr)
            let start = runRelay(["serve", "--socket", relay.socket, "--data", relay.data])
            XCTAssertEqual(start.status, 1)
            XCTAssertTrue(start.stderr.contains(said), start.stderr)
            if !repair.isEmpty { sql(repair) }
        }
    }

    /// After a clean stop the WAL is empty, but its index says how large the database was:
    /// the database deleted or emptied then is refused as lost, not served as a new store.
    func testADatabaseLostAfterACleanStopIsRefused() throws {
        let relay = try RelayProcess()
        try relay.start()
        _ = try relay.provision(families: 1)
        XCTAssertEqual(relay.terminate(), 0)
        let db = relay.data + "/relay.db"
        for state in ["empty", "missing"] {
            if state == "empty" { XCTAssertEqual(truncate(db, 0), 0) } else { try FileManager.default.removeItem(atPath: db) }
            let start = runRelay(["serve", "--socket", relay.socket, "--data", relay.data])
            XCTAssertEqual(start.status, 1, state)
            XCTAssertTrue(start.stderr.contains("relay.db is \(state) but \(db)-shm") && start.stderr.contains("was lost"), start.stderr)
            XCTAssertEqual(runRelay(["check", "--data", relay.data]).status, 1, state)
        }
    }

    /// SQLite opens a store the relay's user may not write for reading only: served so, every
    /// change would fail. The start is refused, and says what to do.
    func testAStoreItsUserCannotWriteIsRefused() throws {
        guard geteuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else {
            throw XCTSkip("running the relay as another user needs root and setpriv (CI has both)")
        }
        let relay = try RelayProcess()
        try relay.start()
        _ = try relay.provision(families: 1)
        XCTAssertEqual(relay.terminate(), 0)
        let nobody: uid_t = 65534
        for name in ["", "/relay.db", "/relay.db-wal", "/relay.db-shm", "/relay.lock"] where access(relay.data + name, F_OK) == 0 {
            XCTAssertEqual(chown(relay.data + name, nobody, nobody), 0, name)
        }
        XCTAssertEqual(chmod(relay.data + "/relay.db", 0o400), 0)
        let start = runRelay(["serve", "--socket", relay.data + "/s", "--data", relay.data], asUser: nobody)
        XCTAssertEqual(start.status, 1)
        XCTAssertTrue(start.stderr.contains("relay.db is read-only to this user"), start.stderr)
    }

    /// A store whose WAL index is gone, on a full disk: SQLite cannot make the index and
    /// says "disk I/O error"; start and check say the disk is full.
    func testAFullDiskIsNamedWhenTheStoreCannotBeOpened() throws {
        let disk = try mountSmallDisk(megabytes: 4)
        defer { unmount(disk) }
        let relay = try RelayProcess(data: disk + "/data")
        try relay.start()
        _ = try relay.provision(families: 1)
        XCTAssertEqual(relay.terminate(), 0)
        try FileManager.default.removeItem(atPath: relay.data + "/relay.db-shm")
        _ = FileManager.default.createFile(atPath: disk + "/filler", contents: nil)
        let filler = try FileHandle(forWritingTo: URL(fileURLWithPath: disk + "/filler"))
        while (try? filler.write(contentsOf: Data(count: 1 << 16))) != nil {}
        try filler.close()
        let start = runRelay(["serve", "--socket", relay.socket, "--data", relay.data])
        XCTAssertEqual(start.status, 1)
        XCTAssertTrue(start.stderr.contains("the disk is full; free some space and start again"), start.stderr)
        let check = runRelay(["check", "--data", relay.data])
        XCTAssertEqual(check.status, 1)
        XCTAssertTrue(check.stderr.contains("the disk is full; free some space and check again"), check.stderr)
    }

    /// A backup onto a full disk says so, and leaves nothing behind.
    func testABackupOntoAFullDiskSaysSoAndLeavesNothing() throws {
        let relay = try RelayProcess()
        try relay.start()
        _ = try relay.provision(families: 1)
        XCTAssertEqual(relay.terminate(), 0)
        execSQL(
            "INSERT INTO hubOutbox(id, family, subject, messageID, body, firstOnSubject) VALUES(1, 'f0', 's', 'm', randomblob(3000000), 1)",
            in: relay.data + "/relay.db")
        let disk = try mountSmallDisk(megabytes: 1)
        defer { unmount(disk) }
        let r = runRelay(["backup", disk + "/b.db", "--data", relay.data])
        XCTAssertEqual(r.status, 1)
        XCTAssertTrue(r.stderr.contains("the disk holding \(disk)/b.db is full; free some space there"), r.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: disk), [])
    }

    /// A tmpfs of `megabytes` mounted on a new directory (root only: skips otherwise).
    private func mountSmallDisk(megabytes: Int) throws -> String {
        guard geteuid() == 0 else { throw XCTSkip("mounting a small file system needs root (CI runs as root)") }
        let disk = FileManager.default.temporaryDirectory.appendingPathComponent("small-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: disk, withIntermediateDirectories: true)
        let mount = try Process.run(
            URL(fileURLWithPath: "/bin/mount"), arguments: ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", disk])
        mount.waitUntilExit()
        guard mount.terminationStatus == 0 else {
            try? FileManager.default.removeItem(atPath: disk)
            throw XCTSkip("cannot mount a tmpfs here")
        }
        return disk
    }

    private func unmount(_ disk: String) {
        if let p = try? Process.run(URL(fileURLWithPath: "/bin/umount"), arguments: [disk]) { p.waitUntilExit() }
        try? FileManager.default.removeItem(atPath: disk)
    }

    /// The fixture is a data directory the journaling relay left when killed: generation 2
    /// of its changes only in `relay.db-changes.0` (see RelayStoreTests' fixture).
    func testTheDataDirectoryOfTheJournalingRelayIsTakenOverAtStart() throws {
        let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("RelayStoreTests/Fixtures/journaled-store")
        let relay = try RelayProcess()
        try FileManager.default.createDirectory(atPath: relay.data, withIntermediateDirectories: true)
        for file in ["relay.db", "relay.db-changes.0", "relay.db-changes.1"] {
            try FileManager.default.copyItem(atPath: fixture.appendingPathComponent(file).path, toPath: relay.data + "/" + file)
        }
        let tokens =
            try JSONSerialization.jsonObject(with: Data(contentsOf: fixture.appendingPathComponent("tokens.json"))) as! [String: String]
        try relay.start()
        XCTAssertFalse(FileManager.default.fileExists(atPath: relay.data + "/relay.db-changes.0"))
        let guardian = try relay.connect()
        let w = try guardian.hello("gwen", tokens["gwen"]!, session: "replay", resume: 0)
        XCTAssertEqual(w["head"]?.int, 8)
        var seqs: [Int64] = []
        for _ in 0..<5 { seqs.append(try guardian.event("question")["seq"]!.int!) }
        XCTAssertEqual(seqs, [1, 3, 5, 6, 8], "every question event, the journal's included")
        let pending = try guardian.request(["type": "pending"])["questions"]?.array?.compactMap { $0["id"]?.string }
        XCTAssertEqual(pending, ["00000000-0000-0000-0000-000000000003", "00000000-0000-0000-0000-000000000005"])
        // The next event continues the stream: no seq is given twice.
        let child = try relay.connect()
        _ = try child.hello("alex", tokens["alex"]!)
        XCTAssertEqual(try child.request(["type": "ask", "question": question()])["type"]?.string, "ok")
        XCTAssertEqual(try guardian.event("question")["seq"]?.int, 9)
    }
}
