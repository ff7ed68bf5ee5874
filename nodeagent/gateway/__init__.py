"""The desktop gateway: the data plane on each node (issue 34).

See docs/architecture.md, "Two planes".
"""
