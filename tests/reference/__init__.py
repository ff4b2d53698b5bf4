"""Self-tests of tpbcast.reference_impl (forked ranks, raw-socket counterparts)."""
