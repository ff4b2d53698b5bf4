"""Fallback dispatch: forked-rank tests over a real gloo group."""
