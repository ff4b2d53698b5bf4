// cbcast_driver.cpp - the C++ example: a broadcaster class that throws, as an `exec:` driver.
//
// What a C++ team writes to judge its own class (say RTP-LLM's CpuTpBroadcaster) with the
// suite: a small Driver class that owns the broadcaster, one method per kit call, each
// catching the class's exceptions and turning them into the kit's error record.  The
// broadcaster here is `Cbcast`, a C++ face over the native C example (../native/cbcast.c)
// that reports every failure as an exception, as a C++ library would.
//
// Built by `python -m tpbcast.conformance.adapters.exec --cxx-path` with
//     g++ -std=c++17 -O2 -Wall -Wextra -Wpedantic -Wold-style-cast -Werror
//         cbcast_driver.cpp tpbcast_driver_check.cpp cbcast.o
// (tpbcast_driver_check.cpp is a second translation unit that includes the kit too).
#include "tpbcast_driver.h"  // first: it asks for POSIX

#include <cstddef>
#include <stdexcept>
#include <string>

// ---- the library under test (stand-in): cbcast's C API behind a class that throws ----

extern "C" {
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
}

namespace example {

// A failed call: cbcast's kind (its enum) and details travel with the exception.
class CbcastError : public std::runtime_error {
  public:
    CbcastError(const std::string &what, const cb_error_info &info)
        : std::runtime_error(what), info_(info) {}
    const cb_error_info &info() const noexcept { return info_; }

  private:
    cb_error_info info_;
};

class Cbcast {
  public:
    Cbcast(long connect_ms, long init_ms, long io_ms)
        : connect_ms_(connect_ms), init_ms_(init_ms), io_ms_(io_ms) {
        apply_deadlines();
    }
    Cbcast(const Cbcast &) = delete;
    Cbcast &operator=(const Cbcast &) = delete;
    ~Cbcast() { cb_reset(); }

    void init(int rank, int world_size, const std::string &base_path) {
        if (base_path.empty()) throw std::invalid_argument("base_path is empty");
        check(cb_init(rank, world_size, base_path.c_str()));
    }
    void broadcast(void *buf, std::size_t nbytes, int root) {
        check(cb_broadcast(buf, nbytes, root));
    }
    void reset() { cb_reset(); }
    bool initialized() const { return cb_is_initialized() != 0; }
    unsigned long long generation() const { return cb_generation(); }
    static constexpr long kKeep = -2;  // set_deadlines_ms: leave this one as it is
    // Milliseconds, -1 = forever, kKeep = unchanged (cbcast takes all three at once).
    void set_deadlines_ms(long connect, long init, long io) {
        if (connect != kKeep) connect_ms_ = connect;
        if (init != kKeep) init_ms_ = init;
        if (io != kKeep) io_ms_ = io;
        apply_deadlines();
    }

  private:
    static void check(int rc) {
        if (rc == 0) return;
        cb_error_info info;
        cb_last_error_info(&info);
        throw CbcastError(cb_last_error(), info);
    }
    void apply_deadlines() { cb_set_deadlines_ms(connect_ms_, init_ms_, io_ms_); }

    long connect_ms_, init_ms_, io_ms_;
};

// ---- the driver: one method per kit call; exceptions become the kit's errors ----

class Driver {
  public:
    explicit Driver(Cbcast &bcast) : bcast_(bcast), message_() {}

    int initialize(int rank, int world_size, const char *base_path, tpbcast_error *err) {
        try {
            bcast_.init(rank, world_size, base_path);
            return 0;
        } catch (...) {
            return fail(err);
        }
    }
    int broadcast(void *buf, std::size_t nbytes, int root, tpbcast_error *err) {
        try {
            bcast_.broadcast(buf, nbytes, root);
            return 0;
        } catch (...) {
            return fail(err);
        }
    }
    int reset(tpbcast_error *err) {
        try {
            bcast_.reset();
            return 0;
        } catch (...) {
            return fail(err);
        }
    }
    bool is_initialized() const { return bcast_.initialized(); }
    unsigned long long generation() const { return bcast_.generation(); }
    int set_deadlines_ms(long long connect, long long init, long long io, tpbcast_error *err) {
        try {
            bcast_.set_deadlines_ms(to_ms(connect), to_ms(init), to_ms(io));
            return 0;
        } catch (...) {
            return fail(err);
        }
    }

    // The kit's table: plain functions that forward to this object.
    tpbcast_driver table() {
        tpbcast_driver d{};  // value-initialised: every optional member is null
        d.name = "tpbcast-native-example-cxx";
        d.version = "0.1.0";
        d.capabilities = "deadlines generation peer_credentials error_details multi_buffer";
        d.self = this;
        d.initialize = [](void *self, int rank, int world, const char *base, tpbcast_error *err) {
            return of(self).initialize(rank, world, base, err);
        };
        d.broadcast = [](void *self, void *buf, size_t n, int root, tpbcast_error *err) {
            return of(self).broadcast(buf, n, root, err);
        };
        d.reset_checked = [](void *self, tpbcast_error *err) { return of(self).reset(err); };
        d.is_initialized = [](void *self) { return of(self).is_initialized() ? 1 : 0; };
        d.set_deadlines_ms = [](void *self, long long c, long long i, long long io,
                                tpbcast_error *err) {
            return of(self).set_deadlines_ms(c, i, io, err);
        };
        d.generation = [](void *self) { return of(self).generation(); };
        return d;
    }

  private:
    static Driver &of(void *self) { return *static_cast<Driver *>(self); }

    // The kit's TPBCAST_KEEP / TPBCAST_FOREVER / milliseconds, as Cbcast spells them.
    static long to_ms(long long value) {
        if (value == TPBCAST_KEEP) return Cbcast::kKeep;
        return value == TPBCAST_FOREVER ? -1L : static_cast<long>(value);
    }

    // Called inside a catch (...): rethrow to tell the exceptions apart.  The message
    // must outlive this call (the kit copies it when it writes the reply): keep it here.
    int fail(tpbcast_error *err) {
        static const char *const kinds[] = {"error",   "config",      "not_initialized",
                                            "broken",  "handshake",   "peer_closed",
                                            "timeout", "security",    "os",
                                            "reinit_mismatch"};
        try {
            throw;
        } catch (const CbcastError &x) {
            const cb_error_info &info = x.info();
            const int n = static_cast<int>(sizeof kinds / sizeof kinds[0]);
            err->error_class = info.kind >= 0 && info.kind < n ? kinds[info.kind] : "error";
            message_ = x.what();
            err->rank = info.rank;
            err->peer = info.peer;
            err->err = info.err > 0 ? info.err : 0;  // cbcast's -1 means EOF, not an errno
            err->bytes_done = info.bytes_done;
            err->bytes_total = info.bytes_total;
            err->elapsed_us = info.elapsed_ms * 1000;
            err->phase = info.phase;
            err->path = info.path;
        } catch (const std::invalid_argument &x) {
            err->error_class = "config";
            message_ = x.what();
        } catch (const std::exception &x) {
            err->error_class = "error";
            message_ = std::string("unexpected exception: ") + x.what();
        }
        err->message = message_.c_str();
        return -1;
    }

    Cbcast &bcast_;
    std::string message_;
};

}  // namespace example

int main() {
    example::Cbcast bcast(120000, 120000, 300000);  // DESIGN.md's defaults, ms
    example::Driver driver(bcast);
    const tpbcast_driver table = driver.table();
    return tpbcast_driver_main(&table);
}
