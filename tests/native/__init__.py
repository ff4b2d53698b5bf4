"""Tests of the native (C via ctypes) example adapter."""
