// kit_probe.cpp - a C++ driver that makes tpbcast_driver.h show its kit-2 behaviours on
// demand (tests/native/test_exec_kit.py).  What it does is chosen by the last component of
// the base path given to initialize:
//   "throw-std"    initialize throws std::runtime_error   (the kit's exception net)
//   "throw-other"  initialize throws an int                (not a std::exception)
//   "refuse"       initialize fails as "config" and leaves err->rank alone
//   "reset-fails"  initialize works; reset_checked then fails as "broken", errno EIO
//   anything else  initialize works
// broadcast always fails as "peer_closed" without touching err->rank (the kit pre-fills it);
// with root 7 it throws std::length_error instead.
#include "tpbcast_driver.h"

#include <cerrno>
#include <stdexcept>
#include <string>

namespace {

class Probe {
  public:
    int initialize(int rank, const std::string &base, tpbcast_error *err) {
        const std::string mode = base.substr(base.rfind('/') + 1);
        if (mode == "throw-std") throw std::runtime_error("probe: initialize threw");
        if (mode == "throw-other") throw 42;
        if (mode == "refuse") {
            err->error_class = "config";
            err->message = "probe: refused";
            return -1;
        }
        rank_ = rank;
        reset_fails_ = mode == "reset-fails";
        return 0;
    }
    int broadcast(int root, tpbcast_error *err) {
        if (root == 7) throw std::length_error("probe: broadcast threw");
        err->error_class = "peer_closed";
        err->message = "probe: the other end closed";
        return -1;
    }
    int reset(tpbcast_error *err) {
        if (reset_fails_) {
            err->error_class = "broken";
            err->message = "probe: reset failed";
            err->err = EIO;
            err->phase = "reset";
            return -1;
        }
        rank_ = -1;
        return 0;
    }
    bool initialized() const { return rank_ >= 0; }

  private:
    int rank_ = -1;
    bool reset_fails_ = false;
};

Probe &of(void *self) { return *static_cast<Probe *>(self); }

}  // namespace

int main() {
    Probe probe;
    tpbcast_driver d{};
    d.name = "kit-probe";
    d.version = "2";
    d.capabilities = "error_details";
    d.self = &probe;
    d.initialize = [](void *self, int rank, int, const char *base, tpbcast_error *err) {
        return of(self).initialize(rank, base, err);
    };
    d.broadcast = [](void *self, void *, size_t, int root, tpbcast_error *err) {
        return of(self).broadcast(root, err);
    };
    d.reset_checked = [](void *self, tpbcast_error *err) { return of(self).reset(err); };
    d.is_initialized = [](void *self) { return of(self).initialized() ? 1 : 0; };
    return tpbcast_driver_main(&d);
}
