/* cbcast_driver.c - the native C example (../native/cbcast.c) as an `exec:` driver.
 *
 * The worked example for tpbcast_driver.h: the four calls (plus deadlines and the
 * generation counter) forward to cbcast's C API and translate its error record.
 * Built by `python -m tpbcast.conformance.adapters.exec.native --path`:
 *     cc -std=c11 -O2 -Wall -Wextra -Werror -o cbcast-driver cbcast_driver.c cbcast.c
 */
#define _GNU_SOURCE
#include "tpbcast_driver.h"

/* cbcast.c's API (it ships no header; see ../native/README.md). */
struct cb_error_info {
    int kind, rank, peer, err;
    long long bytes_done, bytes_total, elapsed_ms;
    const char *phase, *path;
};
int cb_init(int rank, int world_size, const char *base_path);
int cb_broadcast(void *buf, size_t nbytes, int root);
void cb_reset(void);
int cb_is_initialized(void);
void cb_set_deadlines_ms(long connect, long init, long io);
unsigned long long cb_generation(void);
const char *cb_last_error(void);
int cb_last_error_info(struct cb_error_info *out);

/* cbcast's kinds, in its enum's order, as the protocol's error classes. */
static const char *const CLASSES[] = {"error", "config", "not_initialized", "broken",
                                      "handshake", "peer_closed", "timeout", "security",
                                      "os", "reinit_mismatch"};

static int last_error(struct tpbcast_error *err) {
    struct cb_error_info info;
    cb_last_error_info(&info);
    int n = (int)(sizeof CLASSES / sizeof CLASSES[0]);
    err->error_class = info.kind >= 0 && info.kind < n ? CLASSES[info.kind] : "error";
    err->message = cb_last_error();
    err->rank = info.rank;
    err->peer = info.peer;
    err->err = info.err > 0 ? info.err : 0; /* cbcast's -1 means EOF, not an errno */
    err->bytes_done = info.bytes_done;
    err->bytes_total = info.bytes_total;
    err->elapsed_us = info.elapsed_ms * 1000;
    err->phase = info.phase;
    err->path = info.path;
    return -1;
}

static int drv_init(void *self, int rank, int world, const char *base,
                    struct tpbcast_error *err) {
    (void)self;
    return cb_init(rank, world, base) == 0 ? 0 : last_error(err);
}

static int drv_broadcast(void *self, void *buf, size_t n, int root, struct tpbcast_error *err) {
    (void)self;
    return cb_broadcast(buf, n, root) == 0 ? 0 : last_error(err);
}

static void drv_reset(void *self) { (void)self; cb_reset(); }

static int drv_is_initialized(void *self) { (void)self; return cb_is_initialized(); }

/* cbcast takes all three at once: keep the current values for TPBCAST_KEEP. */
static long deadlines[3] = {120000, 120000, 300000}; /* DESIGN.md defaults, ms */

static int drv_deadlines(void *self, long long connect, long long init, long long io,
                         struct tpbcast_error *err) {
    (void)self;
    (void)err;
    long long asked[3] = {connect, init, io};
    for (int i = 0; i < 3; i++)
        if (asked[i] != TPBCAST_KEEP) deadlines[i] = (long)asked[i];
    cb_set_deadlines_ms(deadlines[0], deadlines[1], deadlines[2]);
    return 0;
}

static unsigned long long drv_generation(void *self) { (void)self; return cb_generation(); }

int main(void) {
    struct tpbcast_driver d = {
        .name = "tpbcast-native-example",
        .version = "0.1.0",
        .capabilities = "deadlines generation peer_credentials error_details multi_buffer",
        .initialize = drv_init,
        .broadcast = drv_broadcast,
        .reset = drv_reset,
        .is_initialized = drv_is_initialized,
        .set_deadlines_ms = drv_deadlines,
        .generation = drv_generation,
    };
    return tpbcast_driver_main(&d);
}
