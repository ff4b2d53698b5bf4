// tpbcast_driver_check.cpp - a second translation unit that includes the kit.
//
// Linked into the C++ example's driver (cbcast_driver.cpp): if tpbcast_driver.h defined
// anything with external linkage, the link would fail with a duplicate symbol.  It also
// names every member of the kit's structs, so a C++ compile error in them shows here.
#include "tpbcast_driver.h"

int tpbcast_driver_check_members();

int tpbcast_driver_check_members() {
    tpbcast_driver d{};
    tpbcast_error e{};
    d.keep_signals = e.rank;
    return (d.initialize == nullptr && d.broadcast == nullptr && d.reset == nullptr &&
            d.reset_checked == nullptr && d.is_initialized == nullptr &&
            d.set_deadlines_ms == nullptr && d.generation == nullptr)
               ? TPBCAST_KIT_VERSION
               : 0;
}
