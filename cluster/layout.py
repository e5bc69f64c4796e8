"""Node-level placement: does every bundle of the run find a node, and which node types does the run use.

`fit_nodes(placement, nodes)` is pure: `nodes` is a list of (node type, resources) pairs, from a topology
(`cluster/topologies/*.yaml`, what the cluster has or can scale to), from the running cluster, or from this
machine. It returns one feasible node per placement-group bundle under the group's strategy, or raises
PlacementError naming the resources that are missing, so that a run that cannot be placed is refused
before any actor starts. `describe(...)` prints the layout; `python -m driver.train CONFIG --plan` (or
`cluster.dry_run=true`) calls `plan_main`, which starts nothing.

Ray itself decides the final node of each bundle (PACK and SPREAD are soft); the layout printed here is a
feasible one, and for pinned roles (`cluster.<role>_node_resource`) the node type is the only possible one.
"""
from __future__ import annotations

import os
from collections import Counter

from cluster.placement import ActorSlot, PlacementError, PlacementPlan, check_fits, plan

_EPS = 1e-9
_SEARCH_LIMIT = 200_000


def _fits(bundle: dict, free: dict) -> bool:
    return all(free.get(k, 0.0) + _EPS >= v for k, v in bundle.items() if v > 0)


def _take(free: dict, bundle: dict, sign: float) -> None:
    for k, v in bundle.items():
        free[k] = free.get(k, 0.0) - sign * v


def _why_no_node(slot: ActorSlot, nodes: list) -> str:
    bundle = slot.bundle()
    missing = []
    for key, need in bundle.items():
        best = max((res.get(key, 0.0) for _, res in nodes), default=0.0)
        if best + _EPS < need:
            missing.append(f"no node offers {key}" if best == 0 else f"{need:g} {key} needed, the largest node "
                                                                     f"has {best:g}")
    if not missing:
        missing.append("no single node has all of it")
    return f"{slot.role}[{slot.index}] needs {_fmt(bundle)} on one node: {'; '.join(missing)}"


def fit_nodes(placement: PlacementPlan, nodes: list) -> list:
    """Node index (into `nodes`) of each grouped slot, in `placement.grouped` order; PlacementError if the
    run cannot be placed. `nodes`: [(type name, {resource: amount})]. A search too large to finish is not
    refused (Ray's own placement-group timeout then applies)."""
    totals = Counter()
    for _, res in nodes:
        totals.update(res)
    check_fits(placement, dict(totals))
    grouped = placement.grouped
    for slot in grouped:
        if not any(_fits(slot.bundle(), res) for _, res in nodes):
            raise PlacementError(f"the run cannot be placed: {_why_no_node(slot, nodes)}. Add such nodes "
                                 "(cluster.topology) or lower the role's num_cpus / num_gpus.")
    order = sorted(range(len(grouped)), key=lambda i: -sum(grouped[i].bundle().values()))
    free = [dict(res) for _, res in nodes]
    chosen = [None] * len(grouped)
    steps = [0]

    def search(k: int) -> bool:
        steps[0] += 1
        if steps[0] > _SEARCH_LIMIT:
            raise TimeoutError
        if k == len(order):
            return True
        i = order[k]
        bundle = grouped[i].bundle()
        used = [chosen[j] for j in order[:k]]
        tried = set()
        for n in range(len(nodes)):
            state = (nodes[n][0], tuple(sorted(free[n].items())))
            if state in tried or not _fits(bundle, free[n]):
                continue
            if placement.strategy == "STRICT_PACK" and used and n != used[0]:
                continue
            if placement.strategy == "STRICT_SPREAD" and n in used:
                continue
            tried.add(state)
            _take(free[n], bundle, 1)
            chosen[i] = n
            if search(k + 1):
                return True
            _take(free[n], bundle, -1)
            chosen[i] = None
        return False

    try:
        ok = search(0)
    except TimeoutError:
        return [None] * len(grouped)
    if not ok:
        raise PlacementError(f"the run cannot be placed: {_pinned_shortage(grouped, nodes)}its {len(grouped)} bundles "
                             f"({', '.join(_fmt(s.bundle()) for s in grouped)}) do not fit on the nodes "
                             f"({', '.join(_fmt(r) for _, r in nodes)}) with strategy {placement.strategy}.")
    return chosen


def _pinned_shortage(grouped: list, nodes: list) -> str:
    """'on the nodes offering R: 2 CPU needed, 1 available; ' for each pinned resource R that is short."""
    out = []
    for pin in sorted({s.node_resource for s in grouped if s.node_resource}):
        need, have = Counter(), Counter()
        for s in grouped:
            if s.node_resource == pin:
                need.update({k: v for k, v in s.bundle().items() if k != pin})
        for _, res in nodes:
            if res.get(pin, 0) > 0:
                have.update({k: v for k, v in res.items() if k != pin})
        short = [f"{need[k]:g} {k} needed, {have.get(k, 0):g} available" for k in need if need[k] > have.get(k, 0) + _EPS]
        if short:
            out.append(f"on the nodes offering {pin}: {'; '.join(short)}; ")
    return "".join(out)


# -- where the run is pointed -------------------------------------------------------------------------
def live_nodes() -> list:
    """(name, total resources) of each alive node of the connected Ray cluster."""
    import ray

    out = []
    for node in ray.nodes():
        if node.get("Alive"):
            res = {k: float(v) for k, v in node["Resources"].items()
                   if not k.startswith("node:") and k not in ("memory", "object_store_memory")}
            out.append((_node_name(res, node["NodeID"]), res))
    return out


def _node_name(resources: dict, node_id: str) -> str:
    custom = sorted(k for k in resources if k not in ("CPU", "GPU") and not k.startswith("accelerator_type"))
    return f"{'+'.join(custom) or 'node'}@{node_id[:8]}"


def local_nodes(cluster_cfg) -> list:
    """This machine as the single node of a fresh local Ray instance."""
    gpus = len([d for d in os.listdir("/dev") if d.startswith("nvidia") and d[6:].isdigit()]) \
        if os.path.isdir("/dev") else 0
    return [("local", {"CPU": float(cluster_cfg.num_cpus or os.cpu_count() or 1), "GPU": float(gpus)})]


def target_nodes(cluster_cfg, live: list | None = None) -> tuple:
    """(nodes, description) the run is checked against: the topology at max replicas when
    `cluster.topology` is set (an autoscaler may add those nodes), else the live nodes, else this machine."""
    if cluster_cfg.topology:
        from cluster import topology

        topo = topology.load(cluster_cfg.topology)
        return topo.nodes("max"), f"topology {topo.name} ({topo.source}; every worker type at max_replicas)"
    if live is not None:
        return live, "the running Ray cluster"
    return local_nodes(cluster_cfg), "this machine (a fresh local Ray instance)"


# -- the printed plan ---------------------------------------------------------------------------------
def _fmt(resources: dict) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in resources.items()) + "}"


def describe(placement: PlacementPlan, nodes: list, where: str) -> str:
    """The layout as text: actor -> node (type) with resources, the placement-group bundles, node use."""
    chosen = fit_nodes(placement, nodes)
    ordinal, seen = {}, Counter()
    for n, (name, _) in enumerate(nodes):
        ordinal[n] = f"{name}-{seen[name]}"
        seen[name] += 1
    at = {(s.role, s.index): chosen[i] for i, s in enumerate(placement.grouped)}
    lines = [f"placement on {where}", "", f"{'actor':<14}{'node':<22}resources"]
    for slot in placement.slots:
        n = at.get((slot.role, slot.index))
        node = ordinal[n] if n is not None else ("(search too large)" if slot.in_group else "(any, no group)")
        res = {"CPU": slot.num_cpus, **({"GPU": slot.num_gpus} if slot.num_gpus else {}),
               **({slot.node_resource: 0.001} if slot.node_resource else {})}
        lines.append(f"{slot.role + f'[{slot.index}]':<14}{node:<22}{_fmt(res)}")
    lines += ["", f"placement group: strategy {placement.strategy}, {len(placement.grouped)} bundles"]
    for i, slot in enumerate(placement.grouped):
        node = ordinal[chosen[i]] if chosen[i] is not None else "?"
        lines.append(f"  bundle {i:<3} {_fmt(slot.bundle()):<44} {slot.role}[{slot.index}] -> {node}")
    used = Counter(nodes[n][0] for n in set(c for c in chosen if c is not None))
    have = Counter(name for name, _ in nodes)
    lines += ["", "nodes used: " + ", ".join(f"{t} {used.get(t, 0)} of {have[t]}" for t in have),
              "totals: " + _fmt(placement.totals())]
    return "\n".join(lines)


def plan_main(cfg, config_name: str = "") -> int:
    """`--plan`: print the layout of `cfg` on the nodes it is pointed at; exit 2 if it cannot be placed.
    Starts no Ray instance; with `cluster.address` set and no topology it connects to read the nodes."""
    import sys

    placement = plan(cfg.learner, cfg.rollout, cfg.verifier, cfg.cluster)
    live = None
    if not cfg.cluster.topology and (cfg.cluster.address or os.environ.get("RAY_ADDRESS")):
        import ray

        ray.init(address=cfg.cluster.address or os.environ["RAY_ADDRESS"], log_to_driver=False)
        live = live_nodes()
        ray.shutdown()
    nodes, where = target_nodes(cfg.cluster, live)
    try:
        text = describe(placement, nodes, where)
    except PlacementError as err:
        print(f"placement error ({config_name or 'config'} on {where}): {err}", file=sys.stderr)
        return 2
    print(f"config {config_name}: " + text if config_name else text)
    return 0


__all__ = ["fit_nodes", "describe", "plan_main", "live_nodes", "local_nodes", "target_nodes"]
