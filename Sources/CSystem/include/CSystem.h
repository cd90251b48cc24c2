// The Linux calls Swift's Glibc module does not expose (epoll, accept4, gettid,
// SO_PEERCRED, pipe2) and a signal-to-pipe bridge, wrapped as plain functions
// so Swift sees simple signatures.
#ifndef CSYSTEM_H
#define CSYSTEM_H

#include <stdint.h>
#include <signal.h>
#include <sys/types.h>

/// Readiness bits, as in <sys/epoll.h>.
extern const uint32_t cs_epollin;
extern const uint32_t cs_epollout;
extern const uint32_t cs_epollerr;
extern const uint32_t cs_epollhup;
extern const uint32_t cs_epollrdhup;

/// One ready descriptor returned by cs_epoll_wait.
typedef struct {
    uint64_t token;
    uint32_t events;
} cs_ready;

int cs_epoll_create(void);
/// op: 0 add, 1 modify, 2 delete.
int cs_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t token);
/// Fills up to max entries; returns the count or -1 with errno set.
int cs_epoll_wait(int epfd, cs_ready *out, int max, int timeout_ms);

/// accept4 with SOCK_NONBLOCK | SOCK_CLOEXEC.
int cs_accept(int listen_fd);
/// Creates a non-blocking, close-on-exec Unix stream socket bound to path and listening.
/// Returns the fd or -1 with errno set (-2: path too long).
int cs_listen_unix(const char *path, int backlog);
/// For a socket handed over by a service manager: 0 when fd is a listening Unix stream
/// socket (made non-blocking and close-on-exec), with its path in path (size len, "" for
/// an abstract or unnamed one); -1 otherwise.
int cs_adopt_listening_unix(int fd, char *path, size_t len);
/// Sends state (e.g. "READY=1") to the service manager's $NOTIFY_SOCKET, as sd_notify
/// does: 1 sent, 0 no socket to send to, -1 failed (errno set).
int cs_sd_notify(const char *state);
/// Connects a blocking, close-on-exec Unix stream socket to path. Returns the fd or -1.
int cs_connect_unix(const char *path);
/// Whether something listens on the Unix socket at `path`, without waiting for it to
/// accept: 1 if so (also when its backlog is full), else 0 with errno saying why (ECONNREFUSED,
/// ENOENT: nothing does).
int cs_unix_listener_present(const char *path);
/// The peer's uid of a Unix socket (SO_PEERCRED), or -1.
long cs_peer_uid(int fd);
/// The peer's pid of a Unix socket (SO_PEERCRED; for a connected client, the server's), or -1.
long cs_peer_pid(int fd);
/// pipe2 with O_NONBLOCK | O_CLOEXEC.
int cs_pipe(int fds[2]);
/// Whether `sig` is ignored now (as SIGHUP is under nohup, from the start).
int cs_signal_ignored(int sig);
/// Routes SIGTERM, SIGINT and SIGHUP (unless it was ignored from the start, as under
/// nohup) to one byte (the signal number) written to fd,
/// unblocks them on the calling thread, and ignores SIGPIPE.
int cs_route_signals(int fd);
/// Unblocks SIGTERM, SIGINT and SIGHUP on the calling thread, storing the mask it had in
/// `before` (unless NULL). A blocked signal is inherited across fork and exec from the
/// thread that starts a process, and a Swift program's Dispatch threads block SIGTERM.
int cs_unblock_stop_signals(sigset_t *before);
/// Blocks SIGTERM, SIGINT and SIGHUP on the calling thread (and the threads it starts):
/// they wait, pending, until `cs_route_signals` routes and unblocks them.
int cs_block_stop_signals(void);
int cs_set_nonblocking(int fd);
/// send with MSG_NOSIGNAL | MSG_DONTWAIT.
ssize_t cs_send(int fd, const void *buf, size_t len);
/// Raises the calling thread's nice value by `by` (up to 19), lowering its share of
/// contended cores; Linux keeps it per thread. Returns the new value, or -1 with errno set.
int cs_lower_thread_priority(int by);
/// Sets RLIMIT_NOFILE's soft limit to its hard limit; returns the new soft limit.
long cs_raise_fd_limit(void);
/// Names the calling thread as `top -H`, `ps -L` and `perf` show it (at most 15 bytes
/// are kept). Returns 0, or -1 with errno set.
int cs_name_thread(const char *name);
/// The size of the terminal on fd (ioctl TIOCGWINSZ, which Swift cannot call: it is
/// variadic). Returns 0, or -1 when fd is not a terminal.
int cs_terminal_size(int fd, int *rows, int *cols);

/// A pseudo-terminal: returns its master side's descriptor (close-on-exec) and writes the
/// path of its other side into `slave`; -1 and errno on failure. What tests type into.
int cs_open_pty(char *slave, size_t size);

#endif
