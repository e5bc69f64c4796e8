"""A restarted actor that no node can take: notice it, name what is missing, stop instead of waiting forever.

When the node holding a placement-group bundle dies, Ray reschedules the bundle (the group's state becomes
RESCHEDULING and the bundle has no node) and restarts the actor inside it once the bundle is placed again.
Until then every call to the actor fails at once (`ActorUnavailableError`: "the actor is restarting"). If no
alive node can hold the bundle (the custom node resource that pins the role, `cluster.<role>_node_resource`,
left with the node; or no alive node has the CPUs/GPUs the bundle needs, beside the run's other bundles),
that state lasts until a node comes back: with an autoscaler or KubeRay re-creating the pod, minutes; with
nobody to bring it back, forever.

`PlacementWatch.check()` reads the group's bundles and the alive nodes from the GCS (two cheap calls, no
dashboard needed) and raises `LostPlacement` once a lost bundle has had no alive node able to take it for
`grace_s` seconds (the run uses `cluster.placement_timeout_s`, the time it already gives the autoscaler to
add nodes at start-up), naming the actor, its bundle and the missing resources. `wait_for_actors` is the
bounded wait the driver uses while Ray restarts an actor. Node labels are not read (placement pins roles with
custom resources only).
"""
from __future__ import annotations

import time

from cluster.placement import ActorSlot, PlacementError, PlacementPlan

_EPS = 1e-9


class LostPlacement(PlacementError):
    """An actor's node died and no alive node can take its bundle; the message names the missing resources."""


def _fmt(resources: dict) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in resources.items()) + "}"


def _plain(resources: dict) -> dict:
    """Node resources without Ray's per-node and per-placement-group bookkeeping keys."""
    return {k: float(v) for k, v in resources.items()
            if not k.startswith("node:") and "_group_" not in k and k not in ("memory", "object_store_memory")}


def why_no_node(slot: ActorSlot, free: dict, totals: dict) -> str | None:
    """None when some node can take `slot`'s bundle now (`free`: node -> resources left beside the run's other
    bundles), else why not (`totals`: node -> total resources), naming the missing resources."""
    bundle = slot.bundle()
    if any(all(res.get(k, 0.0) + _EPS >= v for k, v in bundle.items() if v > 0) for res in free.values()):
        return None
    reasons = []
    for key, need in bundle.items():
        best = max((res.get(key, 0.0) for res in totals.values()), default=0.0)
        if best == 0:
            pin = f" (cluster.{slot.role}_node_resource)" if key == slot.node_resource else ""
            reasons.append(f"no alive node offers {key}{pin}")
        elif best + _EPS < need:
            reasons.append(f"{need:g} {key} needed, the largest alive node has {best:g}")
    if not reasons:
        reasons.append("the alive nodes that offer it are taken by the run's other actors")
    return "; ".join(reasons)


class PlacementWatch:
    """Watches one run's placement group for bundles whose node died and that no alive node can take."""

    def __init__(self, placement: PlacementPlan, group, grace_s: float, clock=time.monotonic):
        self.placement, self.group, self.grace_s, self.clock = placement, group, grace_s, clock
        self._since = None  # when the current lost-and-unplaceable state was first seen

    def unplaceable(self) -> list:
        """'role[i] (bundle b {..}): why' for each bundle without an alive node that no alive node can take."""
        import ray

        if self.group is None:
            return []
        try:
            where = ray.util.placement_group_table(self.group).get("bundles_to_node_id", {})
            nodes = {n["NodeID"]: _plain(n.get("Resources", {})) for n in ray.nodes() if n.get("Alive")}
        except Exception:  # the GCS is unreachable: say nothing here, the caller's own deadline applies
            return []
        slots = self.placement.grouped
        free = {node: dict(res) for node, res in nodes.items()}
        lost = []
        for i, slot in enumerate(slots):
            node = where.get(i) or where.get(str(i))
            if node in nodes:
                for k, v in slot.bundle().items():  # this bundle's share of its node is taken
                    free[node][k] = free[node].get(k, 0.0) - v
            else:
                lost.append((i, slot))
        out = []
        for i, slot in lost:
            why = why_no_node(slot, free, nodes)
            if why:
                out.append(f"{slot.role}[{slot.index}] (bundle {i} {_fmt(slot.bundle())}) lost its node, and "
                           f"no alive node can take it: {why}")
        return out

    def reset(self) -> None:
        """Forget an earlier episode: the grace starts again at the next lost-and-unplaceable sighting."""
        self._since = None

    def check(self) -> None:
        """LostPlacement once some bundle has been lost and unplaceable for `grace_s` seconds in a row."""
        reasons = self.unplaceable()
        if not reasons:
            self._since = None
            return
        now = self.clock()
        if self._since is None:
            self._since = now
        if now - self._since >= self.grace_s:
            raise LostPlacement(f"{'; '.join(reasons)} (for {now - self._since:.0f} s; cluster.placement_timeout_s="
                                f"{self.grace_s:g})")


def wait_for_actors(handles: list, watch: PlacementWatch, timeout_s: float, probe: str = "health",
                    call_timeout_s: float = 10.0, every_s: float = 1.0) -> None:
    """Until every actor in `handles` answers `probe` (Ray is restarting the dead ones): LostPlacement as soon
    as `watch` says a lost bundle cannot be placed (after its grace), TimeoutError past `timeout_s`."""
    import ray

    deadline = time.monotonic() + timeout_s
    watch.reset()
    for i, handle in enumerate(handles):
        while True:
            try:
                ray.get(getattr(handle, probe).remote(), timeout=call_timeout_s)
                break
            except Exception as err:
                watch.check()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"actor {i} did not answer {probe}() within {timeout_s:g} s "
                                       f"({type(err).__name__})") from None
                time.sleep(every_s)
