"""Example adapters: how an implementation that is not ours plugs into the suite.

Each sub-package exposes a ``make()`` factory following the adapter contract in
DESIGN.md, so it can be judged with ``--tpbcast-impl <module>:make``.  Nothing
here is imported by the suite itself; adapters are reached only by that string.
"""
