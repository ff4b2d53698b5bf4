/* tpbcast_driver.h - single-header kit for an `exec:` driver of the tpbcast suite.
 *
 * Judge a C or C++ broadcaster without writing any Python (README.md beside this file
 * has the C and the C++ skeleton side by side, and the worked examples):
 *
 *     #include "tpbcast_driver.h"
 *     static int my_init(void *self, int rank, int world, const char *base,
 *                        struct tpbcast_error *err) { ... return 0 or -1; }
 *     ... my_broadcast, my_reset, my_is_initialized ...
 *     int main(void) {
 *         struct tpbcast_driver d = {0};           (C++: tpbcast_driver d{};)
 *         d.name = "mybcast"; d.version = "1.0"; d.capabilities = "deadlines";
 *         d.initialize = my_init; d.broadcast = my_broadcast;
 *         d.reset_checked = my_reset; d.is_initialized = my_is_initialized;
 *         return tpbcast_driver_main(&d);
 *     }
 *
 *     cc -std=c11 -O2 -o my_driver my_driver.c libmine.a
 *     python -m tpbcast.conformance --tpbcast-impl "exec:./my_driver"
 *
 * The suite starts the driver once per broadcaster, in the rank that uses it, and
 * speaks the protocol of SPEC.md ("exec: protocol") on one Unix socket that is the
 * driver's stdin and stdout.  tpbcast_driver_main() moves that socket to a private
 * fd and points fd 1 at fd 2, so a stray printf() cannot corrupt the stream (it
 * ends up in the rank's stderr capture), then serves requests until the rank closes
 * the socket, and returns 0 (return it from main(): exit() runs atexit handlers, as
 * a normal interpreter exit would have in an in-process adapter).
 *
 * Failing calls return -1 and fill *err: `error_class` from the vocabulary below,
 * `message` (copied at once, so a static buffer is fine) and any details you know;
 * the kit pre-fills every detail as unknown (-1 / NULL) except `rank`, which it
 * pre-fills with the rank of the current initialize request or of the last successful
 * one (-1 before that and after a reset).  Error classes map to Python exceptions on
 * the suite's side:
 *     config (ValueError), not_initialized, reinit_mismatch, broken, handshake,
 *     peer_closed, timeout (TimeoutError), security (PermissionError); anything
 *     else is the root class (a RuntimeError).
 * The driver must not be multi-threaded on the channel: calls arrive one at a time.
 *
 * C++: the header compiles cleanly as C++ (checked with -std=c++17 -Wall -Wextra
 * -Wpedantic -Wold-style-cast -Wconversion -Wuseless-cast -Werror).  Map your exceptions
 * to error classes yourself; anything that still escapes a call is caught by the kit
 * and answered as class "error" with its what() (never a crashed driver).
 *
 * Every function here is `static inline`: include the header in as many translation
 * units as you like (one of them calls tpbcast_driver_main); nothing is defined twice.
 *
 * Signal storms: at startup the kit installs a no-op handler for SIGUSR1 and SIGUSR2
 * WITHOUT SA_RESTART (and unblocks them), and declares them in its hello as storm
 * signals, so a SignalStorm fault aimed at the rank is sent here too: your blocking
 * syscalls then return -1/EINTR and must retry (that is what the fault tests).  When
 * the channel ends, the kit writes how many it handled to stderr.  Set .keep_signals
 * if your code uses SIGUSR1/SIGUSR2 itself: the kit then installs and declares nothing.
 * Only C11 + POSIX; no allocation survives a request except the payload buffer.
 */
#ifndef TPBCAST_DRIVER_H
#define TPBCAST_DRIVER_H

/* Include this header first (or define _GNU_SOURCE yourself): -std=c11 hides POSIX. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#define TPBCAST_PROTOCOL_VERSION 1
/* 2: reset_checked, err->rank pre-filled, C++-clean, static inline (one definition). */
#define TPBCAST_KIT_VERSION 2
#define TPBCAST_KEEP (-2LL)    /* set_deadlines_ms: leave this deadline as it is */
#define TPBCAST_FOREVER (-1LL) /* set_deadlines_ms: wait forever */

/* A cast that is a static_cast in C++ (-Wold-style-cast) and a plain cast in C. */
#ifdef __cplusplus
#define TPBCAST_CAST_(type, value) static_cast<type>(value)
#else
#define TPBCAST_CAST_(type, value) ((type)(value))
#endif

struct tpbcast_error {
    const char *error_class; /* "config", "timeout", ...; NULL = "error" */
    const char *message;     /* NULL = "(no message)" */
    int rank, peer, err;     /* err: errno value, 0 = none; peer -1 = none;
                                rank: pre-filled by the kit (see above) */
    long long bytes_done, bytes_total, elapsed_us; /* -1 = unknown */
    const char *phase, *path, *errno_name;         /* NULL = unknown; the suite
                                                      names err itself if errno_name is NULL */
};

struct tpbcast_driver {
    const char *name, *version;
    const char *capabilities; /* space-separated, e.g. "deadlines generation" */
    void *self;               /* passed to every call */
    /* The calls: 0 on success, -1 with *err filled on failure. */
    int (*initialize)(void *self, int rank, int world_size, const char *base_path,
                      struct tpbcast_error *err);
    int (*broadcast)(void *self, void *buf, size_t nbytes, int root,
                     struct tpbcast_error *err);
    void (*reset)(void *self); /* a reset that cannot fail; or set reset_checked */
    int (*is_initialized)(void *self);
    /* Optional (NULL: the request gets an "unsupported" error reply). */
    int (*set_deadlines_ms)(void *self, long long connect, long long init, long long io,
                            struct tpbcast_error *err);
    unsigned long long (*generation)(void *self);
    /* Nonzero: leave SIGUSR1/SIGUSR2 alone and declare no storm signals. */
    int keep_signals;
    /* Kit 2: a reset that can fail (0, or -1 with *err filled; the suite raises it like
     * any other error).  Used instead of .reset when set; one of the two is required. */
    int (*reset_checked)(void *self, struct tpbcast_error *err);
};

/* ---- implementation: all static inline, so any number of translation units may
 * include this header (each gets its own copy; only the one that calls
 * tpbcast_driver_main uses it) ---- */

#define TPBCAST_FN_ static inline

TPBCAST_FN_ int tpbcast_driver_main(const struct tpbcast_driver *d);

enum { TPBCAST_OP_HELLO = 'H', TPBCAST_OP_INIT = 'I', TPBCAST_OP_BCAST = 'B',
       TPBCAST_OP_RESET = 'R', TPBCAST_OP_QUERY = 'Q', TPBCAST_OP_DEADLINES = 'D',
       TPBCAST_OP_GENERATION = 'G' };

struct tpbcast_out_ { unsigned char *p; size_t n, cap; int oom; };

TPBCAST_FN_ void tpbcast_put_(struct tpbcast_out_ *o, const void *src, size_t n) {
    if (o->oom) return;
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->n + n) cap *= 2;
        unsigned char *p = TPBCAST_CAST_(unsigned char *, realloc(o->p, cap));
        if (!p) { o->oom = 1; return; }
        o->p = p; o->cap = cap;
    }
    memcpy(o->p + o->n, src, n);
    o->n += n;
}

/* Little-endian on the wire: write byte by byte, whatever the host order. */
TPBCAST_FN_ void tpbcast_put_u_(struct tpbcast_out_ *o, unsigned long long v, size_t bytes) {
    unsigned char b[8];
    for (size_t i = 0; i < bytes; i++) b[i] = TPBCAST_CAST_(unsigned char, v >> (8 * i));
    tpbcast_put_(o, b, bytes);
}

/* A signed value: two's complement, truncated to `bytes` (-1 stays all ones). */
TPBCAST_FN_ void tpbcast_put_i_(struct tpbcast_out_ *o, long long v, size_t bytes) {
    tpbcast_put_u_(o, TPBCAST_CAST_(unsigned long long, v), bytes);
}

TPBCAST_FN_ void tpbcast_put_str_(struct tpbcast_out_ *o, const char *s) {
    size_t n = s ? strlen(s) : 0;
    tpbcast_put_u_(o, n, 4);
    tpbcast_put_(o, s ? s : "", n);
}

TPBCAST_FN_ unsigned long long tpbcast_get_u_(const unsigned char *p, size_t bytes) {
    unsigned long long v = 0;
    for (size_t i = 0; i < bytes; i++) v |= TPBCAST_CAST_(unsigned long long, p[i]) << (8 * i);
    return v;
}

TPBCAST_FN_ int tpbcast_get_i32_(const unsigned char *p) {
    return TPBCAST_CAST_(int32_t, TPBCAST_CAST_(uint32_t, tpbcast_get_u_(p, 4)));
}

TPBCAST_FN_ long long tpbcast_get_i64_(const unsigned char *p) {
    return TPBCAST_CAST_(long long, tpbcast_get_u_(p, 8));
}

/* EINTRs the kit's own channel I/O retried (reported with the storm counts). */
static long tpbcast_eintr_;

TPBCAST_FN_ int tpbcast_write_all_(int fd, const void *buf, size_t n) {
    const char *p = TPBCAST_CAST_(const char *, buf);
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == ENOTSOCK) k = write(fd, p, n);
        if (k < 0 && errno == EINTR) { tpbcast_eintr_++; continue; }
        if (k <= 0) return -1;
        p += k; n -= TPBCAST_CAST_(size_t, k);
    }
    return 0;
}

/* 1 read, 0 clean EOF before the first byte, -1 error or EOF inside. */
TPBCAST_FN_ int tpbcast_read_all_(int fd, void *buf, size_t n) {
    char *p = TPBCAST_CAST_(char *, buf);
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, p + got, n - got);
        if (k < 0 && errno == EINTR) { tpbcast_eintr_++; continue; }
        if (k < 0) return -1;
        if (k == 0) return got == 0 ? 0 : -1;
        got += TPBCAST_CAST_(size_t, k);
    }
    return 1;
}

TPBCAST_FN_ void tpbcast_put_error_(struct tpbcast_out_ *o, const struct tpbcast_error *e) {
    tpbcast_put_u_(o, 1, 1); /* status: error */
    tpbcast_put_str_(o, e->error_class ? e->error_class : "error");
    tpbcast_put_str_(o, e->message ? e->message : "(no message)");
    tpbcast_put_i_(o, e->rank, 4);
    tpbcast_put_i_(o, e->peer, 4);
    tpbcast_put_i_(o, e->err, 4);
    tpbcast_put_i_(o, e->bytes_done, 8);
    tpbcast_put_i_(o, e->bytes_total, 8);
    tpbcast_put_i_(o, e->elapsed_us, 8);
    tpbcast_put_str_(o, e->phase);
    tpbcast_put_str_(o, e->path);
    tpbcast_put_str_(o, e->errno_name);
}

/* Storm signals: handled (counted) without SA_RESTART, so syscalls see EINTR. */
static volatile sig_atomic_t tpbcast_storm_usr1_, tpbcast_storm_usr2_;
static const char *tpbcast_storm_names_ = ""; /* declared in the hello */

TPBCAST_FN_ void tpbcast_storm_handler_(int sig) {
    if (sig == SIGUSR1) tpbcast_storm_usr1_ = tpbcast_storm_usr1_ + 1;
    else tpbcast_storm_usr2_ = tpbcast_storm_usr2_ + 1;
}

TPBCAST_FN_ void tpbcast_take_storm_signals_(void) {
    struct sigaction sa;
    sigset_t both;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = tpbcast_storm_handler_;
    sa.sa_flags = 0; /* no SA_RESTART: a blocking syscall returns EINTR */
    sigemptyset(&both);
    sigaddset(&both, SIGUSR1);
    sigaddset(&both, SIGUSR2);
    sa.sa_mask = both; /* one handler at a time: the counters have one writer */
    if (sigaction(SIGUSR1, &sa, NULL) != 0 || sigaction(SIGUSR2, &sa, NULL) != 0 ||
        sigprocmask(SIG_UNBLOCK, &both, NULL) != 0) {
        perror("tpbcast_driver: installing the storm signal handlers (declaring none)");
        return;
    }
    tpbcast_storm_names_ = "SIGUSR1 SIGUSR2";
}

/* After the channel ended: block them (a late one cannot cut the line short), report. */
TPBCAST_FN_ void tpbcast_storm_report_(void) {
    if (!tpbcast_storm_names_[0]) return; /* not ours (keep_signals, or install failed) */
    sigset_t both;
    sigemptyset(&both);
    sigaddset(&both, SIGUSR1);
    sigaddset(&both, SIGUSR2);
    sigprocmask(SIG_BLOCK, &both, NULL);
    long usr1 = TPBCAST_CAST_(long, tpbcast_storm_usr1_);
    long usr2 = TPBCAST_CAST_(long, tpbcast_storm_usr2_);
    if (usr1 || usr2)
        fprintf(stderr,
                "tpbcast_driver: pid %ld handled storm signals: SIGUSR1 %ld, SIGUSR2 %ld; "
                "its channel I/O retried EINTR %ld time(s)\n",
                TPBCAST_CAST_(long, getpid()), usr1, usr2, tpbcast_eintr_);
}

TPBCAST_FN_ struct tpbcast_error tpbcast_unknown_(int rank) {
    struct tpbcast_error e = {NULL, NULL, rank, -1, 0, -1, -1, -1, NULL, NULL, NULL};
    return e;
}

/* A C++ exception that escaped one of the driver's calls becomes an error reply of
 * class "error" (the message is copied here: what() dies with the exception). */
static char tpbcast_thrown_message_[512];

TPBCAST_FN_ void tpbcast_thrown_(struct tpbcast_error *e, const char *op, const char *what) {
    snprintf(tpbcast_thrown_message_, sizeof tpbcast_thrown_message_,
             "the driver's %s call threw %s%s", op, what ? "a C++ exception: " : "",
             what ? what : "an exception that is not a std::exception");
    e->error_class = "error";
    e->message = tpbcast_thrown_message_;
}

#if defined(__cplusplus) && (defined(__cpp_exceptions) || defined(__EXCEPTIONS))
#include <exception>
/* Run `stmt`; an exception that escapes it fills *e and sets `thrown`. */
#define TPBCAST_GUARD_(e, thrown, op, stmt)                                            \
    do {                                                                               \
        try {                                                                          \
            stmt;                                                                      \
        } catch (const std::exception &what_) {                                        \
            tpbcast_thrown_(&(e), op, what_.what());                                   \
            thrown = 1;                                                                \
        } catch (...) {                                                                \
            tpbcast_thrown_(&(e), op, NULL);                                           \
            thrown = 1;                                                                \
        }                                                                              \
    } while (0)
#else
#define TPBCAST_GUARD_(e, thrown, op, stmt) \
    do {                                    \
        stmt;                               \
    } while (0)
#endif

/* The kit's own state between requests. */
struct tpbcast_state_ {
    int rank; /* of the last successful initialize; -1 = none (also after a reset) */
};

/* Serve one request whose body (op byte first) is body[0..n).  Returns 0, or -1 when
 * the reply could not be sent (the rank is gone). */
TPBCAST_FN_ int tpbcast_serve_(const struct tpbcast_driver *d, struct tpbcast_state_ *st,
                               int fd, unsigned char *body, size_t n) {
    struct tpbcast_out_ o = {NULL, 0, 0, 0};
    struct tpbcast_error e = tpbcast_unknown_(st->rank);
    const unsigned char *payload = NULL;
    unsigned long long payload_n = 0;
    int op = n ? body[0] : 0, rc = 0, thrown = 0;
    tpbcast_put_u_(&o, 0, 4); /* length, patched below */
    switch (op) {
    case TPBCAST_OP_HELLO:
        tpbcast_put_u_(&o, 0, 1);
        tpbcast_put_u_(&o, TPBCAST_PROTOCOL_VERSION, 4);
        tpbcast_put_str_(&o, d->name);
        tpbcast_put_str_(&o, d->version);
        tpbcast_put_str_(&o, d->capabilities);
        tpbcast_put_str_(&o, tpbcast_storm_names_); /* optional trailing field */
        break;
    case TPBCAST_OP_INIT: {
        if (n < 13 || 13 + tpbcast_get_u_(body + 9, 4) != n) goto bad;
        size_t len = TPBCAST_CAST_(size_t, tpbcast_get_u_(body + 9, 4));
        char *path = TPBCAST_CAST_(char *, malloc(len + 1));
        if (!path) goto bad;
        memcpy(path, body + 13, len);
        path[len] = '\0';
        int rank = tpbcast_get_i32_(body + 1), world = tpbcast_get_i32_(body + 5);
        e.rank = rank;
        TPBCAST_GUARD_(e, thrown, "initialize",
                       rc = d->initialize(d->self, rank, world, path, &e));
        free(path);
        if (rc != 0 || thrown) {
            tpbcast_put_error_(&o, &e);
        } else {
            st->rank = rank;
            tpbcast_put_u_(&o, 0, 1);
        }
        break;
    }
    case TPBCAST_OP_BCAST: {
        if (n < 13 || 13 + tpbcast_get_u_(body + 5, 8) != n) goto bad;
        payload_n = tpbcast_get_u_(body + 5, 8);
        int root = tpbcast_get_i32_(body + 1);
        TPBCAST_GUARD_(e, thrown, "broadcast",
                       rc = d->broadcast(d->self, payload_n ? body + 13 : NULL,
                                         TPBCAST_CAST_(size_t, payload_n), root, &e));
        if (rc != 0 || thrown) tpbcast_put_error_(&o, &e); else tpbcast_put_u_(&o, 0, 1);
        /* The buffer after the call, also after a failure (a peer may hold a prefix). */
        tpbcast_put_u_(&o, payload_n, 8);
        payload = body + 13;
        break;
    }
    case TPBCAST_OP_RESET:
        if (d->reset_checked) {
            TPBCAST_GUARD_(e, thrown, "reset", rc = d->reset_checked(d->self, &e));
        } else if (d->reset) {
            TPBCAST_GUARD_(e, thrown, "reset", d->reset(d->self));
        } else {
            goto unsupported;
        }
        if (rc != 0 || thrown) {
            tpbcast_put_error_(&o, &e);
        } else {
            st->rank = -1;
            tpbcast_put_u_(&o, 0, 1);
        }
        break;
    case TPBCAST_OP_QUERY: {
        int initialized = 0;
        TPBCAST_GUARD_(e, thrown, "is_initialized", initialized = d->is_initialized(d->self));
        if (thrown) {
            tpbcast_put_error_(&o, &e);
            break;
        }
        tpbcast_put_u_(&o, 0, 1);
        tpbcast_put_u_(&o, initialized ? 1 : 0, 1);
        break;
    }
    case TPBCAST_OP_DEADLINES:
        if (n != 25) goto bad;
        if (!d->set_deadlines_ms) goto unsupported;
        TPBCAST_GUARD_(e, thrown, "set_deadlines_ms",
                       rc = d->set_deadlines_ms(d->self, tpbcast_get_i64_(body + 1),
                                                tpbcast_get_i64_(body + 9),
                                                tpbcast_get_i64_(body + 17), &e));
        if (rc != 0 || thrown) tpbcast_put_error_(&o, &e); else tpbcast_put_u_(&o, 0, 1);
        break;
    case TPBCAST_OP_GENERATION: {
        unsigned long long generation = 0;
        if (!d->generation) goto unsupported;
        TPBCAST_GUARD_(e, thrown, "generation", generation = d->generation(d->self));
        if (thrown) {
            tpbcast_put_error_(&o, &e);
            break;
        }
        tpbcast_put_u_(&o, 0, 1);
        tpbcast_put_u_(&o, generation, 8);
        break;
    }
    default:
        goto bad;
    }
    goto send;
unsupported:
    e.error_class = "unsupported";
    e.message = "this driver does not implement the request (its capabilities omit it)";
    tpbcast_put_error_(&o, &e);
    goto send;
bad:
    fprintf(stderr, "tpbcast_driver: malformed request (op %d, %zu bytes); stopping\n",
            op, n);
    free(o.p);
    return -1;
send:
    if (o.oom) { free(o.p); return -1; }
    {
        unsigned long long total = o.n - 4 + payload_n;
        for (size_t i = 0; i < 4; i++) o.p[i] = TPBCAST_CAST_(unsigned char, total >> (8 * i));
    }
    rc = tpbcast_write_all_(fd, o.p, o.n);
    if (rc == 0 && payload_n)
        rc = tpbcast_write_all_(fd, payload, TPBCAST_CAST_(size_t, payload_n));
    free(o.p);
    return rc;
}

TPBCAST_FN_ int tpbcast_driver_main(const struct tpbcast_driver *d) {
    struct tpbcast_state_ st = {-1};
    /* 1. Take the channel (fd 0 = fd 1 = the socket) to a private close-on-exec fd. */
    int fd = fcntl(0, F_DUPFD_CLOEXEC, 3);
    if (fd < 0) { perror("tpbcast_driver: dup of the channel"); return 2; }
    /* 2. fd 1 -> fd 2 (stray output goes to the rank's stderr), fd 0 -> /dev/null. */
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (dup2(2, 1) < 0 || null_fd < 0 || dup2(null_fd, 0) < 0) {
        perror("tpbcast_driver: redirecting fds 0/1");
        return 2;
    }
    close(null_fd);
    /* 3. Storm signals, before the hello that declares them. */
    if (!d->keep_signals) tpbcast_take_storm_signals_();
    int rc = 0;
    for (;;) {
        unsigned char head[4];
        int got = tpbcast_read_all_(fd, head, 4);
        if (got == 0) break; /* the rank closed the channel: a normal end */
        if (got < 0) { perror("tpbcast_driver: reading a request"); rc = 3; break; }
        size_t n = TPBCAST_CAST_(size_t, tpbcast_get_u_(head, 4));
        unsigned char *body = TPBCAST_CAST_(unsigned char *, malloc(n ? n : 1));
        if (!body) {
            fprintf(stderr, "tpbcast_driver: out of memory (%zu bytes)\n", n);
            rc = 3;
            break;
        }
        if (tpbcast_read_all_(fd, body, n) != 1 && n) {
            perror("tpbcast_driver: reading a request body");
            free(body);
            rc = 3;
            break;
        }
        int served = tpbcast_serve_(d, &st, fd, body, n);
        free(body);
        if (served != 0) { rc = 3; break; }
    }
    close(fd);
    tpbcast_storm_report_();
    return rc;
}

#endif /* TPBCAST_DRIVER_H */
