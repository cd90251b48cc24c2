#define _GNU_SOURCE
#include "CSystem.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

const uint32_t cs_epollin = EPOLLIN;
const uint32_t cs_epollout = EPOLLOUT;
const uint32_t cs_epollerr = EPOLLERR;
const uint32_t cs_epollhup = EPOLLHUP;
const uint32_t cs_epollrdhup = EPOLLRDHUP;

int cs_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

int cs_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t token) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = events;
    ev.data.u64 = token;
    int cop = op == 0 ? EPOLL_CTL_ADD : op == 1 ? EPOLL_CTL_MOD : EPOLL_CTL_DEL;
    return epoll_ctl(epfd, cop, fd, &ev);
}

int cs_epoll_wait(int epfd, cs_ready *out, int max, int timeout_ms) {
    struct epoll_event evs[256];
    if (max > 256) max = 256;
    int n;
    do {
        n = epoll_wait(epfd, evs, max, timeout_ms);
    } while (n < 0 && errno == EINTR);
    for (int i = 0; i < n; i++) {
        out[i].token = evs[i].data.u64;
        out[i].events = evs[i].events;
    }
    return n;
}

int cs_accept(int listen_fd) {
    int fd;
    do {
        fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    return fd;
}

static int fill_addr(struct sockaddr_un *addr, const char *path) {
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    /* An empty name is Linux's abstract namespace, which no file mode protects. */
    if (path[0] == 0 || strlen(path) >= sizeof addr->sun_path) return -1;
    strcpy(addr->sun_path, path);
    return 0;
}

int cs_listen_unix(const char *path, int backlog) {
    struct sockaddr_un addr;
    if (fill_addr(&addr, path) != 0) return -2;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, backlog) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int cs_adopt_listening_unix(int fd, char *path, size_t len) {
    int type = 0, listening = 0;
    socklen_t n = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &n) != 0 || type != SOCK_STREAM) return -1;
    n = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &n) != 0 || !listening) return -1;
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    n = sizeof addr;
    if (getsockname(fd, (struct sockaddr *)&addr, &n) != 0 || addr.sun_family != AF_UNIX) return -1;
    if (len > 0) {
        size_t name = n > offsetof(struct sockaddr_un, sun_path) ? n - offsetof(struct sockaddr_un, sun_path) : 0;
        if (name > 0 && addr.sun_path[0] == 0) name = 0;  // abstract: no path to show
        if (name >= len) name = len - 1;
        memcpy(path, addr.sun_path, name);
        path[name] = 0;
    }
    if (cs_set_nonblocking(fd) != 0) return -1;
    return fcntl(fd, F_SETFD, FD_CLOEXEC) == 0 ? 0 : -1;
}

int cs_sd_notify(const char *state) {
    const char *target = getenv("NOTIFY_SOCKET");
    if (target == NULL || target[0] == 0) return 0;
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    size_t n = strlen(target);
    if ((target[0] != '/' && target[0] != '@') || n >= sizeof addr.sun_path) { errno = EINVAL; return -1; }
    memcpy(addr.sun_path, target, n);
    if (target[0] == '@') addr.sun_path[0] = 0;  // abstract namespace
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    socklen_t size = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    ssize_t sent = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&addr, size);
    int saved = errno;
    close(fd);
    errno = saved;
    return sent < 0 ? -1 : 1;
}

int cs_connect_unix(const char *path) {
    struct sockaddr_un addr;
    if (fill_addr(&addr, path) != 0) { errno = path[0] == 0 ? EINVAL : ENAMETOOLONG; return -1; }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int rc;
    do {
        rc = connect(fd, (struct sockaddr *)&addr, sizeof addr);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int cs_unix_listener_present(const char *path) {
    struct sockaddr_un addr;
    if (fill_addr(&addr, path) != 0) { errno = path[0] == 0 ? EINVAL : ENAMETOOLONG; return 0; }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return 0;
    int rc;
    do {
        rc = connect(fd, (struct sockaddr *)&addr, sizeof addr);
    } while (rc != 0 && errno == EINTR);
    int saved = errno;
    close(fd);
    if (rc == 0 || saved == EAGAIN) return 1;
    errno = saved;
    return 0;
}

long cs_peer_uid(int fd) {
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
    return (long)cred.uid;
}

long cs_peer_pid(int fd) {
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
    return (long)cred.pid;
}

int cs_pipe(int fds[2]) { return pipe2(fds, O_NONBLOCK | O_CLOEXEC); }

static volatile int signal_fd = -1;

static void on_signal(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (signal_fd >= 0) (void)!write(signal_fd, &b, 1);
    errno = saved;
}

int cs_signal_ignored(int sig) {
    struct sigaction now;
    return sigaction(sig, NULL, &now) == 0 && now.sa_handler == SIG_IGN;
}

int cs_route_signals(int fd) {
    signal_fd = fd;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGTERM, &sa, NULL) != 0) return -1;
    if (sigaction(SIGINT, &sa, NULL) != 0) return -1;
    /* A hang-up ignored from the start stays ignored: whoever ran the program so (nohup)
       asked that it outlive its terminal. */
    struct sigaction hup;
    if (sigaction(SIGHUP, NULL, &hup) != 0) return -1;
    if (hup.sa_handler != SIG_IGN && sigaction(SIGHUP, &sa, NULL) != 0) return -1;
    signal(SIGPIPE, SIG_IGN);
    return cs_unblock_stop_signals(NULL);
}

/* SIGTERM, SIGINT and SIGHUP: the signals that stop the programs. */
static sigset_t stop_signals(void) {
    sigset_t stops;
    sigemptyset(&stops);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGINT);
    sigaddset(&stops, SIGHUP);
    return stops;
}

int cs_unblock_stop_signals(sigset_t *before) {
    sigset_t stops = stop_signals();
    return pthread_sigmask(SIG_UNBLOCK, &stops, before) == 0 ? 0 : -1;
}

int cs_block_stop_signals(void) {
    sigset_t stops = stop_signals();
    return pthread_sigmask(SIG_BLOCK, &stops, NULL) == 0 ? 0 : -1;
}

int cs_set_nonblocking(int fd) {
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0) return -1;
    return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

ssize_t cs_send(int fd, const void *buf, size_t len) {
    ssize_t n;
    do {
        n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    return n;
}

int cs_lower_thread_priority(int by) {
    id_t tid = (id_t)syscall(SYS_gettid);
    errno = 0;
    int now = getpriority(PRIO_PROCESS, tid);
    if (now == -1 && errno != 0) return -1;
    int target = now + by > 19 ? 19 : now + by;
    if (setpriority(PRIO_PROCESS, tid, target) != 0) return -1;
    return target;
}

long cs_raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return (long)rl.rlim_cur;
}

int cs_name_thread(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0);
}

int cs_terminal_size(int fd, int *rows, int *cols) {
    struct winsize ws;
    if (ioctl(fd, TIOCGWINSZ, &ws) != 0 || ws.ws_row == 0 || ws.ws_col == 0) return -1;
    *rows = ws.ws_row;
    *cols = ws.ws_col;
    return 0;
}

int cs_open_pty(char *slave, size_t size) {
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) return -1;
    if (grantpt(master) != 0 || unlockpt(master) != 0 || ptsname_r(master, slave, size) != 0) {
        int saved = errno;
        close(master);
        errno = saved;
        return -1;
    }
    return master;
}
