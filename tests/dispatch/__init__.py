"""Fallback dispatch (issue 6): forked-rank tests over a real gloo group."""
