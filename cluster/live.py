"""The run against the live cluster, before its placement group is created (cluster/launch.py).

A run is first checked against the nodes it is pointed at (`cluster.layout.target_nodes`): the topology at
max_replicas when `cluster.topology` is set, else the alive nodes. With a topology, the alive nodes are checked
too: when they cannot hold the run, waiting for the placement group (`cluster.placement_timeout_s`, 600 s in the
paper configs) only helps if an autoscaler can add nodes. Without one (a local instance, or a cluster whose monitor
runs Ray's read-only provider, as under a plain `ray start`) the run fails at once, naming what is missing; with one,
or when it cannot be told, the run waits and says what it waits for.

How an autoscaler is told apart (Ray 2.60): the monitor on the head writes its status into the GCS key-value store
(`DEBUG_AUTOSCALING_STATUS`) every few seconds. Its `autoscaler_report.node_type_mapping` maps each node to its node
type: a read-only monitor names every node `node_<its own id>`, an autoscaler the node types of its config
(`ray.head.default`, a KubeRay group, ...). Autoscaler v2 (KubeRay's `RAY_enable_autoscaler_v2`) always scales.
"""
from __future__ import annotations

import json
import logging
from typing import Optional

from cluster.layout import fit_nodes, live_nodes
from cluster.placement import PlacementError, PlacementPlan

log = logging.getLogger("genselect.cluster")


def check_live(placement: PlacementPlan, cluster_cfg, local: bool, live: Optional[list] = None) -> None:
    """PlacementError when the alive nodes cannot hold `placement` and no autoscaler can add nodes; a warning when
    one may. `local`: the driver started the Ray instance itself (no autoscaler); `live`: the alive nodes
    (default: read from the connected cluster)."""
    live = live_nodes() if live is None else live
    try:
        fit_nodes(placement, live)
        return
    except PlacementError as err:
        shortfall = str(err)
    scaling = False if local else autoscaling()
    where = f"the running Ray cluster ({describe_nodes(live)})"
    topology = cluster_cfg.topology
    if scaling is False:
        raise PlacementError(f"{where} cannot hold the run and has no autoscaler to add nodes (cluster.topology="
                             f"{topology} lists nodes it lacks; cluster.topology= plans on the live nodes): {shortfall}")
    log.warning("%s does not hold the run yet (%s); waiting up to %g s (cluster.placement_timeout_s) for %s to add "
                "nodes of topology %s", where, shortfall, cluster_cfg.placement_timeout_s,
                "its autoscaler" if scaling else "an autoscaler, if it has one,", topology)


def autoscaling() -> Optional[bool]:
    """Whether the connected cluster has an autoscaler that can add nodes: True, False, or None when its monitor
    has not reported yet."""
    from ray._private import ray_constants
    from ray.autoscaler.v2.utils import is_autoscaler_v2
    from ray.experimental.internal_kv import _internal_kv_get

    try:
        if is_autoscaler_v2(fetch_from_server=True):
            return True
        return scaling_from_status(_internal_kv_get(ray_constants.DEBUG_AUTOSCALING_STATUS))
    except Exception as err:  # an older or newer Ray without these internals: the run waits, as it used to
        log.info("could not read the autoscaler's status: %s", err)
        return None


def scaling_from_status(raw) -> Optional[bool]:
    """From the monitor's status (JSON bytes or str; None when it has written none): True for an autoscaler, False
    for the read-only provider, None when there is no report to tell."""
    if not raw:
        return None
    report = json.loads(raw).get("autoscaler_report") or {}
    mapping = report.get("node_type_mapping") or {}
    if not mapping:
        return None
    return not all(node_type == f"node_{node}" for node, node_type in mapping.items())


def describe_nodes(nodes: list) -> str:
    """'1 alive node: {CPU: 2, GPU: 0}' (each node's resources)."""
    shown = ", ".join("{" + ", ".join(f"{k}: {v:g}" for k, v in {"CPU": 0.0, "GPU": 0.0, **res}.items()
                                     if not k.startswith("accelerator_type")) + "}" for _, res in nodes)
    return f"{len(nodes)} alive node{'s' if len(nodes) != 1 else ''}: {shown or 'none'}"


__all__ = ["check_live", "autoscaling", "scaling_from_status", "describe_nodes"]
