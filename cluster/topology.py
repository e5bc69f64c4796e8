"""Cluster topologies: the node types a Ray cluster has or can scale to, from one YAML file.

A topology (`cluster/topologies/NAME.yaml`) is the single source for everything that needs to know the
cluster's shape:

- `cluster.placement.fit_nodes` checks a run's placement against it before any actor starts (and
  `python -m driver.train CONFIG --plan` prints the layout);
- `cluster.local` starts it on one machine with Ray's multi-node harness (`ray.cluster_utils.Cluster`);
- `cluster.autoscale` turns its worker types into the fake multi-node autoscaler's `available_node_types`;
- `cluster.kuberay.generate` turns it into a KubeRay `RayCluster` (and `RayJob`) manifest.

Schema (every key but `name` and `head` optional)::

    name: paper-gpu
    image: genselect-rl:0.1.0-gpu    # container image (KubeRay); default: the tag cluster/image/build.sh gives
    head: {resources: {CPU: 8}, memory: 32Gi}
    workers:
      rollout:                         # one worker group / node type
        resources: {CPU: 8, GPU: 1, rollout_node: 1}   # what one node offers Ray (custom ones included)
        replicas: 8                    # nodes started (local harness) / desired (KubeRay)
        min_replicas: 0                # autoscaling bounds
        max_replicas: 8
        memory: 64Gi                   # container memory (KubeRay only)

Pure: imports only the standard library, yaml and core.named_yaml.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

TOPOLOGY_DIR = Path(__file__).resolve().parent / "topologies"


class TopologyError(ValueError):
    """A topology file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class NodeType:
    name: str
    resources: dict
    replicas: int = 1
    min_replicas: int = 0
    max_replicas: int = 1
    memory: str = ""
    labels: dict = field(default_factory=dict)

    def custom_resources(self) -> dict:
        """Resources other than CPU and GPU (what `ray start --resources` takes)."""
        return {k: v for k, v in self.resources.items() if k not in ("CPU", "GPU")}


@dataclass(frozen=True)
class Topology:
    name: str
    head: NodeType
    workers: tuple
    image: str = ""
    source: str = ""

    def worker(self, name: str) -> NodeType:
        for node_type in self.workers:
            if node_type.name == name:
                return node_type
        raise TopologyError(f"{self.source}: no worker type {name!r} (have {[w.name for w in self.workers]})")

    def nodes(self, count: str = "max") -> list:
        """One (type name, resources) per node: the head, then each worker type `count` times
        ('max': max_replicas, what an autoscaler may reach; 'replicas': what is started up front)."""
        out = [(self.head.name, dict(self.head.resources))]
        for w in self.workers:
            n = w.max_replicas if count == "max" else w.replicas
            out += [(w.name, dict(w.resources)) for _ in range(n)]
        return out


def resolve(name_or_path: str) -> Path:
    from core.named_yaml import find_named_yaml

    try:
        return find_named_yaml(name_or_path, TOPOLOGY_DIR, "topology")
    except LookupError as err:
        raise TopologyError(str(err)) from None


def load(name_or_path: str) -> Topology:
    path = resolve(name_or_path)
    raw = yaml.safe_load(path.read_text()) or {}
    unknown = set(raw) - {"name", "image", "head", "workers"}
    if unknown or "head" not in raw:
        raise TopologyError(f"{path}: needs 'head'; unknown keys {sorted(unknown)}")
    head = _node_type(path, "head", raw["head"], worker=False)
    workers = tuple(_node_type(path, name, spec, worker=True) for name, spec in (raw.get("workers") or {}).items())
    return Topology(raw.get("name", path.stem), head, workers, raw.get("image", ""), str(path))


def _node_type(path: Path, name: str, spec: dict, worker: bool) -> NodeType:
    spec = dict(spec or {})
    allowed = {"resources", "replicas", "min_replicas", "max_replicas", "memory", "labels"}
    if set(spec) - allowed:
        raise TopologyError(f"{path}: {name}: unknown keys {sorted(set(spec) - allowed)}")
    resources = {str(k): float(v) for k, v in (spec.get("resources") or {}).items()}
    if "CPU" not in resources:
        raise TopologyError(f"{path}: {name}.resources needs CPU")
    replicas = int(spec.get("replicas", 1 if worker else 1))
    lo, hi = int(spec.get("min_replicas", 0 if worker else 1)), int(spec.get("max_replicas", max(replicas, 1)))
    if worker and not (0 <= lo <= hi and replicas <= hi):
        raise TopologyError(f"{path}: {name}: needs 0 <= min_replicas <= max_replicas and replicas <= max_replicas")
    return NodeType(name, resources, replicas, lo, hi, str(spec.get("memory", "")), dict(spec.get("labels") or {}))
