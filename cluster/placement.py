"""Placement: which actors the run needs and whether the cluster can hold them.

`plan(...)` is a pure function of the config: one placement-group bundle per learner rank and per rollout
engine (CPUs and GPUs from the config, plus 0.001 of a custom node resource when the role is pinned with
`cluster.<role>_node_resource`), verifier actors outside the group when they reserve nothing.
`check_fits(plan, available)` (cluster totals) and `fit_nodes(plan, nodes)` (node by node: every bundle on
a node that can hold it, under the group's strategy) fail with a clear message naming the missing
resources *before any actor starts*; `create_group` and `actor_options` are what cluster/launch.py starts the actors
with.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

NODE_RESOURCE_UNIT = 0.001  # what one pinned actor takes of its node resource (a node offering 1 holds 1000)


class PlacementError(RuntimeError):
    """The configured actors cannot be placed on the available resources."""


@dataclass(frozen=True)
class ActorSlot:
    """One actor of the run: its role, index, and the resources it reserves."""
    role: str  # "learner", "rollout" or "verifier"
    index: int
    num_cpus: float
    num_gpus: float
    node_resource: str = ""  # custom resource that pins the actor to the nodes offering it

    @property
    def in_group(self) -> bool:
        return self.num_cpus > 0 or self.num_gpus > 0 or bool(self.node_resource)

    def bundle(self) -> dict:
        bundle = {"CPU": self.num_cpus} if self.num_cpus or not self.node_resource else {}
        if self.num_gpus:
            bundle["GPU"] = self.num_gpus
        if self.node_resource:
            bundle[self.node_resource] = NODE_RESOURCE_UNIT
        return bundle


@dataclass(frozen=True)
class PlacementPlan:
    slots: tuple
    strategy: str

    def of(self, role: str) -> list:
        return [s for s in self.slots if s.role == role]

    @property
    def grouped(self) -> list:
        return [s for s in self.slots if s.in_group]

    def totals(self) -> dict:
        """CPU and GPU of every actor, and the custom node resources of the grouped ones."""
        out = {"CPU": sum(s.num_cpus for s in self.slots), "GPU": sum(s.num_gpus for s in self.slots)}
        for s in self.grouped:
            if s.node_resource:
                out[s.node_resource] = out.get(s.node_resource, 0.0) + NODE_RESOURCE_UNIT
        return out


def plan(learner_cfg, rollout_cfg, verifier_cfg, cluster_cfg) -> PlacementPlan:
    """The actors a run needs, from the learner, rollout, verifier and cluster sub-configs."""
    pin = {role: getattr(cluster_cfg, f"{role}_node_resource", "") for role in ("learner", "rollout", "verifier")}
    slots = [ActorSlot("learner", i, learner_cfg.num_cpus, learner_cfg.num_gpus, pin["learner"])
             for i in range(learner_cfg.num_ranks)]
    slots += [ActorSlot("rollout", i, rollout_cfg.num_cpus, rollout_cfg.num_gpus, pin["rollout"])
              for i in range(rollout_cfg.num_workers)]
    slots += [ActorSlot("verifier", i, verifier_cfg.num_cpus, 0.0, pin["verifier"])
              for i in range(verifier_cfg.num_workers)]
    return PlacementPlan(tuple(slots), cluster_cfg.placement_strategy)


def check_fits(placement: PlacementPlan, available: dict) -> None:
    """Raise PlacementError naming what is short; `available` is like `ray.cluster_resources()`."""
    need = placement.totals()
    short = [f"no node offers {k} (cluster.{_pinned_role(placement, k)}_node_resource)" if k not in ("CPU", "GPU")
             and not available.get(k) else f"{need[k]:g} {k} needed, {available.get(k, 0):g} available"
             for k in need if need[k] > available.get(k, 0) + 1e-9]
    if short:
        roles = ", ".join(f"{s.role}[{s.index}]: {s.num_cpus:g} CPU {s.num_gpus:g} GPU" for s in placement.slots)
        raise PlacementError(f"the run cannot be placed ({'; '.join(short)}). Actors: {roles}. Lower "
                             "learner.num_ranks / rollout.num_workers or their num_cpus / num_gpus, or add "
                             "nodes that offer the missing resources.")
    for slot in placement.slots:
        if slot.num_gpus > 1 and not float(slot.num_gpus).is_integer():
            raise PlacementError(f"{slot.role}[{slot.index}]: num_gpus={slot.num_gpus} must be whole above 1")


def _pinned_role(placement: PlacementPlan, resource: str) -> str:
    return next((s.role for s in placement.slots if s.node_resource == resource), "<role>")


def actor_env(slot: ActorSlot, base: dict) -> dict:
    """The env vars of the actor of `slot`: `base` (the driver's defaults) with its OpenMP threads and DeepSpeed's
    accelerator chosen from the actor's own resources (DS_ACCELERATOR: cuda with a GPU share, else cpu), never
    the driver's: a driver on a CPU head sets cpu for itself."""
    return {**base, "OMP_NUM_THREADS": str(max(1, ceil_cpus(slot.num_cpus))),
            "DS_ACCELERATOR": "cuda" if slot.num_gpus > 0 else "cpu"}


def actor_options(slot: ActorSlot, placement_group: Any, bundle_index: int | None, **extra) -> dict:
    """ray.remote options for `slot`: its resources and, when grouped, its bundle."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    options = {"num_cpus": slot.num_cpus, "num_gpus": slot.num_gpus, **extra}
    if bundle_index is not None:
        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            placement_group=placement_group, placement_group_bundle_index=bundle_index)
    return options


def create_group(placement: PlacementPlan, timeout_s: float):
    """Create the placement group and wait until it is placed (PlacementError on timeout)."""
    import ray
    from ray.util.placement_group import placement_group

    bundles = [s.bundle() for s in placement.grouped]
    if not bundles:
        return None
    group = placement_group(bundles, strategy=placement.strategy)
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        ray.util.remove_placement_group(group)
        raise PlacementError(f"placement group {bundles} ({placement.strategy}) not placed within {timeout_s:g} s")
    return group


def bundle_indices(placement: PlacementPlan) -> dict:
    """(role, index) -> bundle index inside the group, for grouped slots."""
    return {(s.role, s.index): i for i, s in enumerate(placement.grouped)}


def ceil_cpus(value: float) -> int:
    return int(math.ceil(value))


def node_ip_of_bundle(group: Any, bundle_index: int) -> str:
    """IP address of the node that holds `bundle_index` of `group` (the learners' rendezvous address)."""
    import ray

    if group is None:
        return ray.util.get_node_ip_address()
    node_id = ray.util.placement_group_table(group)["bundles_to_node_id"][bundle_index]
    for node in ray.nodes():
        if node["NodeID"] == node_id:
            return node["NodeManagerAddress"]
    raise PlacementError(f"node {node_id} of bundle {bundle_index} is not in the cluster")
