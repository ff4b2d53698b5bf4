/*
 * cbcast.c - a small C broadcaster speaking tpbcast wire protocol v1.
 *
 * Why it exists: the conformance suite must judge implementations that are not
 * Python.  This file is the proof: a native library, written from the byte
 * description in DESIGN.md ("Wire protocol v1"), loaded through ctypes by
 * adapter.py.  It is an example, not a product: one broadcaster per process
 * (process-global state), which suits the harness because every rank is a
 * forked process.
 *
 * Wire v1 in short: rank 0 listens on "<base>_0.sock"; each peer k connects,
 * sends k as a native-endian int32; when all peers are in, rank 0 sends the
 * probe byte 0x5a to peers 1..n-1 in ascending order; a broadcast is the raw
 * payload written to peer 1, then peer 2, ... with no header.
 *
 * Deliberate differences from the upstream C++ class (see DESIGN.md): one
 * init deadline, not one per peer; deadlines on broadcast I/O (io < 0 means
 * wait forever); EOF is reported as "peer closed", never as "Success"; every
 * fd is CLOEXEC; the socket is chmod 0600 and peers are checked with
 * SO_PEERCRED; a stale socket is replaced but any other file is refused.
 *
 * Every function returns 0 on success and -1 on error; cb_last_error() then
 * names the rank, phase, peer, bytes done/total, elapsed time, path and the
 * errno NAME.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CB_PROBE 0x5a
#define CB_PATH_MAX 107 /* sizeof(sun_path) - 1 on Linux */
#define CB_WORLD_MAX 4096
#define CB_RETRY_US 50000LL /* connect retry interval, 50 ms */
#define CB_EOF (-1) /* pseudo errno: the other side closed the stream */

/* Error kinds: adapter.py maps each to a Python exception class. */
enum { CB_OK, CB_CONFIG, CB_NOT_INIT, CB_BROKEN, CB_HANDSHAKE, CB_CLOSED,
       CB_TIMEOUT, CB_SECURITY, CB_OS, CB_MISMATCH };

struct cb_error_info {
    int kind, rank, peer, err; /* err: errno value, CB_EOF, or 0 */
    long long bytes_done, bytes_total, elapsed_ms;
    const char *phase, *path;
};

static struct {
    int initialized, broken, rank, world, listen_fd, bound;
    int *fds; /* fds[k]: rank 0's link to peer k; a peer uses fds[0] */
    char base[CB_PATH_MAX + 1], path[CB_PATH_MAX + 1];
    long connect_ms, init_ms, io_ms;
    unsigned long long generation;
} g = {0, 0, 0, 1, -1, 0, NULL, "", "", 120000, 120000, 300000, 0};

static char msg[1536], err_phase[32], err_path[CB_PATH_MAX + 1];
static struct cb_error_info info;

/* Microseconds: a deadline in whole ms would fire up to 1 ms early. */
static long long now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static const char *errno_name(int e) {
    switch (e) {
#define N(x) case x: return #x;
    N(EPIPE) N(ECONNRESET) N(ECONNREFUSED) N(ECONNABORTED) N(ENOENT) N(EACCES)
    N(EPERM) N(ETIMEDOUT) N(EINTR) N(EAGAIN) N(EBADF) N(EINVAL) N(ENAMETOOLONG)
    N(EADDRINUSE) N(EIO) N(ENOTSOCK) N(EMFILE) N(ENFILE) N(ENOMEM) N(ENOBUFS)
    N(EEXIST) N(ENOTDIR) N(ELOOP) N(ENOTCONN) N(EISDIR) N(EROFS) N(ENOSPC)
    N(EFAULT) N(EPROTO) N(EADDRNOTAVAIL)
#undef N
    default: {
        static char other[32];
        snprintf(other, sizeof other, "errno %d", e);
        return other;
    }
    }
}

/* Record an error and return -1.  `err` is an errno value (named in the
 * message), CB_EOF ("peer closed") or 0 (the detail says it all). */
static int fail(int kind, int err, const char *phase, int peer, long long done,
                long long total, long long start, const char *fmt, ...) {
    char detail[1024], cause[160] = "", where[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    if (err == CB_EOF)
        snprintf(cause, sizeof cause, ": peer closed (EOF)");
    else if (err > 0)
        snprintf(cause, sizeof cause, ": %s (%s)", errno_name(err), strerror(err));
    int n = snprintf(where, sizeof where, " [");
    if (peer >= 0)
        n += snprintf(where + n, sizeof where - (size_t)n, "peer %d, ", peer);
    if (total > 0)
        n += snprintf(where + n, sizeof where - (size_t)n, "%lld/%lld bytes, ", done, total);
    n += snprintf(where + n, sizeof where - (size_t)n, "%lld ms", (now_us() - start) / 1000);
    if (g.path[0])
        n += snprintf(where + n, sizeof where - (size_t)n, ", path %s", g.path);
    snprintf(where + n, sizeof where - (size_t)n, "]");
    snprintf(msg, sizeof msg, "rank %d %s: %s%s%s", g.rank, phase, detail, cause, where);
    snprintf(err_phase, sizeof err_phase, "%s", phase);
    snprintf(err_path, sizeof err_path, "%s", g.path);
    info = (struct cb_error_info){kind, g.rank, peer, err, done, total,
                                  (now_us() - start) / 1000, err_phase, err_path};
    return -1;
}

static long long deadline_after(long ms) { return ms < 0 ? -1 : now_us() + ms * 1000LL; }

/* Wait for `events` on fd until `deadline` (-1: forever).  0 ready, -1 errno. */
static int wait_fd(int fd, short events, long long deadline, short *revents) {
    for (;;) {
        struct pollfd p = {fd, events, 0};
        long long left = deadline < 0 ? -1 : deadline - now_us();
        if (deadline >= 0 && left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        long long ms = left < 0 ? -1 : (left + 999) / 1000; /* round up: never early */
        int r = poll(&p, 1, ms > INT_MAX ? INT_MAX : (int)ms);
        if (r < 0 && errno != EINTR)
            return -1;
        if (r > 0) {
            *revents = p.revents;
            return 0;
        }
    }
}

/* Move exactly n bytes, looping over partial I/O and EINTR, under one
 * deadline.  The I/O is tried first and poll() runs only when the socket
 * would block: polling before every chunk costs a syscall and a wake-up per
 * socket-buffer's worth.  Returns 0, 1 on EOF (reading), or -1 with errno. */
static int io_all(int fd, void *buf, size_t n, int writing, long long deadline, size_t *done) {
    char *p = buf;
    short rev = 0;
    *done = 0;
    while (*done < n) {
        ssize_t k = writing ? send(fd, p + *done, n - *done, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : recv(fd, p + *done, n - *done, MSG_DONTWAIT);
        if (k > 0) {
            *done += (size_t)k;
            rev = 0;
        } else if (k == 0) {
            if (!writing)
                return 1;
            errno = EPIPE;
            return -1;
        } else if (errno == EINTR) {
            continue;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
            return -1;
        } else if (rev & (POLLERR | POLLNVAL)) { /* never spin on a dead fd */
            errno = EIO;
            return -1;
        } else if (wait_fd(fd, writing ? POLLOUT : POLLIN, deadline, &rev) != 0) {
            return -1;
        }
    }
    return 0;
}

static int io_kind(int r, int e) {
    if (r == 1 || e == EPIPE || e == ECONNRESET)
        return CB_CLOSED;
    return e == ETIMEDOUT ? CB_TIMEOUT : CB_OS;
}

static void close_all(void) {
    if (g.fds) {
        for (int k = 0; k < g.world; k++)
            if (g.fds[k] >= 0)
                close(g.fds[k]);
        free(g.fds);
        g.fds = NULL;
    }
    if (g.listen_fd >= 0)
        close(g.listen_fd);
    g.listen_fd = -1;
    if (g.bound)
        unlink(g.path);
    g.bound = 0;
}

static void make_addr(struct sockaddr_un *a) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    memcpy(a->sun_path, g.path, strlen(g.path) + 1);
}

/* "1, 2" for the peer ranks that have not announced yet (TIME-1: name who is missing). */
static void missing_ranks(char *out, size_t size) {
    size_t n = 0;
    out[0] = '\0';
    for (int k = 1; k < g.world && n + 16 < size; k++)
        if (g.fds[k] < 0)
            n += (size_t)snprintf(out + n, size - n, "%s%d", n ? ", " : "", k);
}

static int root_bootstrap(long long start) {
    struct stat st;
    struct sockaddr_un a;
    size_t done = 0;
    int want = g.world - 1, got = 0;
    if (lstat(g.path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return fail(CB_SECURITY, 0, "bind", -1, 0, 0, start,
                        "refusing to replace a %s at the socket path (only a stale socket is removed)",
                        S_ISLNK(st.st_mode) ? "symlink" : S_ISDIR(st.st_mode) ? "directory"
                        : S_ISREG(st.st_mode) ? "regular file" : "non-socket file");
        if (unlink(g.path) != 0 && errno != ENOENT)
            return fail(CB_OS, errno, "bind", -1, 0, 0, start, "unlink of a stale socket failed");
    } else if (errno != ENOENT) {
        return fail(CB_OS, errno, "bind", -1, 0, 0, start, "lstat of the socket path failed");
    }
    g.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (g.listen_fd < 0)
        return fail(CB_OS, errno, "bind", -1, 0, 0, start, "socket() failed");
    make_addr(&a);
    if (bind(g.listen_fd, (struct sockaddr *)&a, sizeof a) != 0)
        return fail(CB_OS, errno, "bind", -1, 0, 0, start, "bind() failed");
    g.bound = 1;
    if (chmod(g.path, 0600) != 0)
        return fail(CB_OS, errno, "bind", -1, 0, 0, start, "chmod 0600 of the socket failed");
    if (listen(g.listen_fd, want) != 0)
        return fail(CB_OS, errno, "listen", -1, 0, 0, start, "listen(backlog %d) failed", want);
    long long deadline = g.init_ms < 0 ? -1 : start + g.init_ms * 1000LL;
    while (got < want) {
        short rev = 0;
        if (wait_fd(g.listen_fd, POLLIN, deadline, &rev) != 0) {
            int e = errno;
            char missing[256];
            missing_ranks(missing, sizeof missing);
            return fail(e == ETIMEDOUT ? CB_TIMEOUT : CB_OS, e, "accept", -1, 0, 0, start,
                        "waiting for peers: %d of %d connected, missing rank(s) %s "
                        "(init deadline %ld ms)",
                        got, want, missing, g.init_ms);
        }
        int c = accept4(g.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED)
                continue;
            return fail(CB_OS, errno, "accept", -1, 0, 0, start, "accept4() failed");
        }
        struct ucred cr;
        socklen_t len = sizeof cr;
        if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
            int e = errno;
            close(c);
            return fail(CB_OS, e, "accept", -1, 0, 0, start, "SO_PEERCRED failed");
        }
        if (cr.uid != geteuid()) {
            close(c);
            return fail(CB_SECURITY, 0, "accept", -1, 0, 0, start,
                        "rejected a connection from uid %u (pid %d); only uid %u may join",
                        (unsigned)cr.uid, (int)cr.pid, (unsigned)geteuid());
        }
        int32_t peer = 0;
        int r = io_all(c, &peer, sizeof peer, 0, deadline, &done);
        if (r != 0) {
            int e = r == 1 ? CB_EOF : errno;
            close(c);
            return fail(e == ETIMEDOUT ? CB_TIMEOUT : CB_HANDSHAKE, e, "handshake", -1,
                        (long long)done, 4, start, "reading the rank of the peer with pid %d",
                        (int)cr.pid);
        }
        if (peer <= 0 || peer >= g.world || g.fds[peer] >= 0) {
            close(c);
            return fail(CB_HANDSHAKE, 0, "handshake", -1, 4, 4, start,
                        "%s peer rank %d from pid %d (world_size %d)",
                        peer > 0 && peer < g.world ? "duplicate" : "bad", (int)peer,
                        (int)cr.pid, g.world);
        }
        g.fds[peer] = c;
        got++;
    }
    for (int k = 1; k < g.world; k++) {
        unsigned char probe = CB_PROBE;
        int r = io_all(g.fds[k], &probe, 1, 1, deadline, &done);
        if (r != 0)
            return fail(io_kind(r, errno), errno, "probe", k, 0, 1, start,
                        "sending probe 0x5a failed");
    }
    return 0;
}

static void sleep_us(long long us) {
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int peer_bootstrap(long long start) {
    struct sockaddr_un a;
    long long cdeadline = g.connect_ms < 0 ? -1 : start + g.connect_ms * 1000LL;
    int attempts = 0, last = 0, fd = -1;
    size_t done = 0;
    make_addr(&a);
    for (;;) {
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            return fail(CB_OS, errno, "connect", 0, 0, 0, start, "socket() failed");
        attempts++;
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            break;
        last = errno;
        close(fd);
        long long left = cdeadline < 0 ? CB_RETRY_US : cdeadline - now_us();
        if (left <= 0)
            return fail(CB_TIMEOUT, last, "connect", 0, 0, 0, start,
                        "no listener accepted us after %d attempts (connect deadline %ld ms)",
                        attempts, g.connect_ms);
        sleep_us(left < CB_RETRY_US ? left : CB_RETRY_US);
    }
    g.fds[0] = fd;
    long long deadline = deadline_after(g.init_ms);
    int32_t me = g.rank;
    int r = io_all(fd, &me, sizeof me, 1, deadline, &done);
    if (r != 0)
        return fail(io_kind(r, errno), errno, "handshake", 0, (long long)done, 4, start,
                    "sending our rank failed");
    unsigned char probe = 0;
    r = io_all(fd, &probe, 1, 0, deadline, &done);
    if (r != 0) {
        int e = r == 1 ? CB_EOF : errno;
        return fail(e == ETIMEDOUT ? CB_TIMEOUT : CB_HANDSHAKE, e, "probe", 0, 0, 1, start,
                    "waiting for probe 0x5a (init deadline %ld ms)", g.init_ms);
    }
    if (probe != CB_PROBE)
        return fail(CB_HANDSHAKE, 0, "probe", 0, 1, 1, start, "expected probe 0x5a, got 0x%02x",
                    (unsigned)probe);
    return 0;
}

int cb_init(int rank, int world_size, const char *base_path) {
    long long start = now_us();
    size_t blen = base_path ? strlen(base_path) : 0;
    if (g.initialized) {
        if (rank == g.rank && world_size == g.world && base_path && !strcmp(base_path, g.base))
            return 0;
        return fail(CB_MISMATCH, 0, "init", -1, 0, 0, start,
                    "re-init mismatch: was rank=%d world_size=%d base_path=%s, now rank=%d "
                    "world_size=%d base_path=%s; call reset() first",
                    g.rank, g.world, g.base, rank, world_size, base_path ? base_path : "(null)");
    }
    close_all();
    g.rank = rank;
    g.path[0] = '\0';
    if (world_size < 1 || world_size > CB_WORLD_MAX)
        return fail(CB_CONFIG, 0, "init", -1, 0, 0, start, "world_size must be 1..%d, got %d",
                    CB_WORLD_MAX, world_size);
    if (rank < 0 || rank >= world_size)
        return fail(CB_CONFIG, 0, "init", -1, 0, 0, start,
                    "rank must be 0 <= rank < world_size (%d), got %d", world_size, rank);
    if (blen == 0)
        return fail(CB_CONFIG, 0, "init", -1, 0, 0, start, "base_path is empty");
    if (blen + strlen("_0.sock") > CB_PATH_MAX)
        return fail(CB_CONFIG, 0, "init", -1, 0, 0, start,
                    "rank-0 socket path is %zu bytes, limit %d (sun_path): %s_0.sock",
                    blen + strlen("_0.sock"), CB_PATH_MAX, base_path);
    g.world = world_size;
    memcpy(g.base, base_path, blen + 1);
    snprintf(g.path, sizeof g.path, "%s_0.sock", base_path);
    if (world_size > 1) {
        g.fds = malloc(sizeof(int) * (size_t)world_size);
        if (!g.fds)
            return fail(CB_OS, ENOMEM, "init", -1, 0, 0, start, "out of memory");
        for (int k = 0; k < world_size; k++)
            g.fds[k] = -1;
        if ((rank == 0 ? root_bootstrap(start) : peer_bootstrap(start)) != 0) {
            close_all();
            g.world = 1;
            return -1;
        }
    }
    g.broken = 0;
    g.initialized = 1;
    return 0;
}

int cb_broadcast(void *buf, size_t nbytes, int root) {
    long long start = now_us(), deadline = deadline_after(g.io_ms);
    size_t done = 0;
    if (!g.initialized)
        return fail(CB_NOT_INIT, 0, "broadcast", -1, 0, (long long)nbytes, start,
                    "broadcast called before initialize");
    if (g.broken)
        return fail(CB_BROKEN, 0, "broadcast", -1, 0, (long long)nbytes, start,
                    "refusing to broadcast: a previous broadcast failed; call reset() first");
    if (root != 0)
        return fail(CB_CONFIG, 0, "broadcast", -1, 0, (long long)nbytes, start,
                    "only root=0 is supported (star topology), got root=%d", root);
    if (g.world == 1 || nbytes == 0)
        return 0;
    if (!buf)
        return fail(CB_CONFIG, 0, "broadcast", -1, 0, (long long)nbytes, start,
                    "NULL buffer for %zu bytes", nbytes);
    for (int k = (g.rank == 0 ? 1 : 0); k < (g.rank == 0 ? g.world : 1); k++) {
        int r = io_all(g.fds[k], buf, nbytes, g.rank == 0, deadline, &done);
        if (r != 0) {
            int e = r == 1 ? CB_EOF : errno;
            g.broken = 1;
            return fail(io_kind(r, e), e, "broadcast", k, (long long)done, (long long)nbytes,
                        start, "%s peer %d failed (io deadline %ld ms)",
                        g.rank == 0 ? "write to" : "read from", k, g.io_ms);
        }
    }
    return 0;
}

void cb_reset(void) {
    close_all();
    g.initialized = g.broken = 0;
    g.rank = 0;
    g.world = 1;
    g.base[0] = g.path[0] = '\0';
    g.generation++;
}

int cb_is_initialized(void) { return g.initialized; }

int cb_rank(void) { return g.rank; }

void cb_set_deadlines_ms(long connect, long init, long io) {
    g.connect_ms = connect;
    g.init_ms = init;
    g.io_ms = io;
}

unsigned long long cb_generation(void) { return g.generation; }

const char *cb_last_error(void) { return msg; }

int cb_last_error_info(struct cb_error_info *out) {
    if (!out)
        return -1;
    *out = info;
    return 0;
}
