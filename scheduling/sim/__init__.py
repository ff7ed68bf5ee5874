"""Trace simulator for GPU-sharing placement (the FGD paper's protocol), pure Python, no Django.

See ``docs/sim.md``. Entry point: ``python -m scheduling.sim openb --pods ... --nodes ...``.
"""

from .cluster import Cluster
from .policies import POLICIES, BestFitPolicy, FGDPolicy, Policy, RandomPolicy, make_policy
from .trace import Node, Pod, load_nodes, load_pods
from .workload import typical_pods

__all__ = [
    "POLICIES",
    "BestFitPolicy",
    "Cluster",
    "FGDPolicy",
    "Node",
    "Pod",
    "Policy",
    "RandomPolicy",
    "load_nodes",
    "load_pods",
    "make_policy",
    "typical_pods",
]
