"""The conformance plugin's parts, one job each; ``tpbcast.conformance.plugin`` assembles
them (its docstring lists the hooks in the order pytest calls them)."""
