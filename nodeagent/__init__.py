"""Deskpool node agent: probes GPUs, runs desktops, converges to the portal's desired state.

Standalone: never imports Django. The wire contract with the portal is :mod:`nodeagent.protocol`.
"""
