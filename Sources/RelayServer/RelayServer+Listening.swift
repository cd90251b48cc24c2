// Accepting connections: the socket file (made, watched, removed), and connections
// refused with `busy` when the relay is full, out of descriptors or unable to store.

import CSystem
import Glibc
import RelayCore
import RelayProtocol

extension RelayServer {
    /// Whether something listens on the socket `path`, also one too busy to accept (errno
    /// says why not).
    public static func isServed(_ path: String) -> Bool { cs_unix_listener_present(path) == 1 }

    /// What a relay says when another one already serves its socket `path`.
    public static func servedAlready(_ path: String) -> String {
        "another relay is already serving \(path); stop it first, or give this one a --socket and a --data of its own"
    }

    func bindSocketPath() throws {
        let path = config.socketPath
        var st = stat()
        if lstat(path, &st) == 0 {
            // Only a socket is ever removed: a mistyped --socket must not cost someone a file.
            guard st.st_mode & S_IFMT == S_IFSOCK else {
                throw ServerError("\(path) exists and is not a socket; choose another --socket, or remove it if it is not needed")
            }
            if Self.isServed(path) { throw ServerError(Self.servedAlready(path)) }
            guard errno == ECONNREFUSED || errno == ENOTSOCK else {
                throw ServerError("\(path) exists and cannot be checked: \(String(cString: strerror(errno)))")
            }
            log(.info, "removing stale socket \(path) left by a relay that did not stop cleanly")
            unlink(path)
        }
        // Made private, then opened as far as configured: the umask is the whole process's,
        // and one wider than the relay's own would reach the files its threads make meanwhile.
        let oldMask = umask(0o077)
        listenFD = cs_listen_unix(path, 1024)
        umask(oldMask)
        if listenFD == -2 {
            throw ServerError("socket path is empty or too long (at most \(ServerConfig.maxSocketPathBytes) bytes): \(path)")
        }
        guard listenFD >= 0 else { throw ServerError("cannot listen on \(path): \(String(cString: strerror(errno)))") }
        guard chmod(path, config.socketMode) == 0 else {
            throw ServerError("cannot set the mode of \(path): \(String(cString: strerror(errno)))")
        }
        socketFile = Self.fileID(path)
    }

    static func openSpare() -> Int32 { open("/dev/null", O_RDONLY | O_CLOEXEC) }

    /// The device and inode of the file at `path`, not following a symbolic link.
    private static func fileID(_ path: String) -> (dev_t, ino_t)? {
        var st = stat()
        return lstat(path, &st) == 0 ? (st.st_dev, st.st_ino) : nil
    }

    /// Says once (again after it came back) that the socket file is gone or another's: a
    /// relay no client can reach would otherwise go on unnoticed.
    func checkSocketFile() {
        guard let mine = socketFile else { return }  // a service manager's socket is its own
        let ours = Self.fileID(config.socketPath).map { $0 == mine } ?? false
        if !ours && !socketFileLost {
            log(
                .error,
                "the socket \(config.socketPath) was removed or replaced: no new client can reach this relay (its connections"
                    + " go on); stop it and start it again to listen there")
        }
        socketFileLost = !ours
    }

    /// Removes the socket file if it is still this relay's: one removed meanwhile (say, by a
    /// cleaner of /tmp) may have been replaced by another relay's, which must stay.
    func removeSocketFile() {
        guard let mine = socketFile, let now = Self.fileID(config.socketPath), now == mine else { return }
        unlink(config.socketPath)
    }

    func acceptAll() {
        while true {
            let fd = cs_accept(listenFD)
            guard fd >= 0 else {
                if errno == EMFILE || errno == ENFILE, refuseWithSpare() { continue }
                return
            }
            if conns.count >= config.maxConnections {
                refuse(fd, "at its connection limit (\(config.maxConnections))")
                continue
            }
            if turnMillis < refusingUntil && !diskHasRoomAgain() {
                refuse(fd, "unable to store changes (\(commitFailure)) for another \((refusingUntil - turnMillis + 999) / 1000) s")
                continue
            }
            let uid = cs_peer_uid(fd)
            // Another user's connections that have not said hello are bounded: on a socket all
            // users reach, one user holding them cannot keep every other client out. Peers
            // whose user cannot be read are counted together, as one other user ((uid_t)-1 is
            // no user's).
            let foreign: UInt32? = uid < 0 ? .max : uid > 0 && UInt32(uid) != coreConfig.relayUID ? UInt32(uid) : nil
            if let foreign, handshaking[foreign, default: 0] >= maxHandshakingPerUser {
                refuse(fd, "holding \(maxHandshakingPerUser) connections of your user that have not said hello")
                continue
            }
            let id = nextID
            nextID += 1
            let c = Conn(id: id, fd: fd, decoder: FrameDecoder(maxFrameBytes: coreConfig.maxFrameBytes), at: turnMillis)
            if let foreign {
                c.handshakingUser = foreign
                handshaking[foreign, default: 0] += 1
            }
            conns[id] = c
            relay.connected(id, peerUID: uid >= 0 ? UInt32(uid) : nil)
            log(.debug, "connection \(id) opened (uid \(uid >= 0 ? String(uid) : "unknown"))")
            setInterest(c)
        }
    }

    /// Connections that have not said hello one user other than the relay's own (or root)
    /// may hold: a quarter of all.
    var maxHandshakingPerUser: Int { max(1, config.maxConnections / 4) }

    /// Whether space was freed on a full disk since a commit failed for it: the relay then
    /// takes connections again at once rather than at the end of its pause.
    private func diskHasRoomAgain() -> Bool {
        guard let before = freeAtFullDisk, let dir = config.dataDirectory, let now = config.diskSpace(dir),
            Int64(now.available) >= before + (1 << 20)
        else { return false }
        (freeAtFullDisk, refusingUntil) = (nil, .min)
        log(.info, "the data directory's file system has \(DiskSpace.shown(now.available)) free again: taking connections")
        return true
    }

    /// Tells a connection `busy`, closes it (once its client has, or in a moment: see
    /// `lingering`; at once when out of descriptors), and notes it for the log.
    private func refuse(_ fd: Int32, _ why: String, linger: Bool = true) {
        let frame = RequestError(.busy, "the relay is \(why); try again later").frame(re: nil).frame
        _ = frame.withUnsafeBytes { cs_send(fd, $0.baseAddress, $0.count) }
        if linger && lingering.count < Self.maxLingering && Glibc.shutdown(fd, Int32(SHUT_WR)) == 0 {
            lingering.append((fd, turnMillis + Self.lingerMillis))
        } else {
            Glibc.close(fd)
        }
        refusedSinceLog += 1
        refusalReason = why
        logRefusals()
    }

    /// Closes the refused connections whose clients have closed theirs, or whose moment is over.
    func closeLingering() {
        guard !lingering.isEmpty else { return }
        lingering.removeAll { refused in
            var n = 0
            repeat {
                n = scratch.withUnsafeMutableBytes { Glibc.read(refused.fd, $0.baseAddress, $0.count) }
            } while n > 0
            let over = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || turnMillis >= refused.until
            if over { Glibc.close(refused.fd) }
            return over
        }
    }

    /// Logs the connections refused since the last such line, once a second at most.
    func logRefusals() {
        guard refusedSinceLog > 0, turnMillis - lastRefusalLog >= 1000 else { return }
        let what = refusedSinceLog == 1 ? "a connection" : "\(refusedSinceLog) connections"
        log(.warning, "refused \(what): the relay is \(refusalReason)")
        refusedSinceLog = 0
        lastRefusalLog = turnMillis
    }

    /// Out of descriptors: lets the spare go to take the next waiting connection, refuses it,
    /// and takes the spare back; true when it took one. When even that fails with connections
    /// still waiting, accepting pauses.
    private func refuseWithSpare() -> Bool {
        var fd: Int32 = -1
        var nothingWaiting = false
        if spareFD >= 0 {
            Glibc.close(spareFD)
            fd = cs_accept(listenFD)
            nothingWaiting = fd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
            if fd >= 0 { refuse(fd, "out of file descriptors", linger: false) }
            spareFD = Self.openSpare()
        }
        if fd < 0 && !nothingWaiting { pauseAccepting() }
        return fd >= 0
    }

    /// Stops watching the listening socket for a tenth of a second, when even the spare
    /// could not take a waiting connection (the whole system is out of descriptors).
    private func pauseAccepting() {
        guard acceptPausedUntil == nil else { return }
        acceptPausedUntil = turnMillis + 100
        cs_epoll_ctl(epfd, 1, listenFD, 0, Self.listenToken)
        guard turnMillis - lastRefusalLog >= 1000 else { return }
        log(.warning, "out of file descriptors, even the one kept in reserve: not accepting connections for a while")
        lastRefusalLog = turnMillis
    }
}
