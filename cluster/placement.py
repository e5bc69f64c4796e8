"""Placement: which actors the run needs, whether the cluster can hold them, and launching them.

`plan(...)` is a pure function of the config: one placement-group bundle per learner rank and per rollout
engine (CPUs and GPUs from the config), verifier actors outside the group when they reserve nothing.
`check_fits(plan, available)` fails with a clear message *before any actor starts* when the cluster cannot
hold the plan. `launch(...)` creates the placement group, waits for it with a timeout, and applies
`ray.remote(**options)` to the plain actor classes (ARCHITECTURE.md: classes stay plain).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


class PlacementError(RuntimeError):
    """The configured actors cannot be placed on the available resources."""


@dataclass(frozen=True)
class ActorSlot:
    """One actor of the run: its role, index, and the resources it reserves."""
    role: str  # "learner", "rollout" or "verifier"
    index: int
    num_cpus: float
    num_gpus: float

    @property
    def in_group(self) -> bool:
        return self.num_cpus > 0 or self.num_gpus > 0

    def bundle(self) -> dict:
        bundle = {"CPU": self.num_cpus}
        if self.num_gpus:
            bundle["GPU"] = self.num_gpus
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
        return {"CPU": sum(s.num_cpus for s in self.slots), "GPU": sum(s.num_gpus for s in self.slots)}


def plan(learner_cfg, rollout_cfg, verifier_cfg, cluster_cfg) -> PlacementPlan:
    """The actors a run needs, from the learner, rollout, verifier and cluster sub-configs."""
    slots = [ActorSlot("learner", i, learner_cfg.num_cpus, learner_cfg.num_gpus) for i in range(learner_cfg.num_ranks)]
    slots += [ActorSlot("rollout", i, rollout_cfg.num_cpus, rollout_cfg.num_gpus) for i in range(rollout_cfg.num_workers)]
    slots += [ActorSlot("verifier", i, verifier_cfg.num_cpus, 0.0) for i in range(verifier_cfg.num_workers)]
    return PlacementPlan(tuple(slots), cluster_cfg.placement_strategy)


def check_fits(placement: PlacementPlan, available: dict) -> None:
    """Raise PlacementError naming what is short; `available` is like `ray.cluster_resources()`."""
    need = placement.totals()
    short = [f"{need[k]:g} {k} needed, {available.get(k, 0):g} available"
             for k in ("CPU", "GPU") if need[k] > available.get(k, 0) + 1e-9]
    if short:
        roles = ", ".join(f"{s.role}[{s.index}]: {s.num_cpus:g} CPU {s.num_gpus:g} GPU" for s in placement.slots)
        raise PlacementError(f"the run cannot be placed ({'; '.join(short)}). Actors: {roles}. Lower "
                             "learner.num_ranks / rollout.num_workers or their num_cpus / num_gpus.")
    for slot in placement.slots:
        if slot.num_gpus > 1 and not float(slot.num_gpus).is_integer():
            raise PlacementError(f"{slot.role}[{slot.index}]: num_gpus={slot.num_gpus} must be whole above 1")


@dataclass
class Handles:
    """Live actor handles of a run, and the placement group holding them."""
    learners: list = field(default_factory=list)
    rollouts: list = field(default_factory=list)
    verifiers: list = field(default_factory=list)
    placement_group: Any = None


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


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now ("" = every interface, for peers on other nodes)."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


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


def launch(cfg, model_path: str, actor_env: dict, domains: tuple = ("math",)) -> Handles:
    """Start every actor of `cfg` (a TrainConfig) on the running Ray cluster; PlacementError if it cannot fit.

    Rollout actors are restartable (Ray restarts a dead one; the driver re-issues its prompts and pushes the
    current weights into it); learner ranks are not (a learner failure stops the run; resume=auto goes on).
    """
    import ray

    from actors.learner import Learner
    from actors.rollout import RolloutWorker
    from actors.verifier import VerifierPool

    placement = plan(cfg.learner, cfg.rollout, cfg.verifier, cfg.cluster)
    check_fits(placement, ray.cluster_resources())
    group = create_group(placement, cfg.cluster.placement_timeout_s)
    index = bundle_indices(placement)

    def options(slot: ActorSlot, **extra) -> dict:
        threads = str(max(1, ceil_cpus(slot.num_cpus)))
        env = {**actor_env, "OMP_NUM_THREADS": threads}
        return actor_options(slot, group, index.get((slot.role, slot.index)),
                             runtime_env={"env_vars": env}, **extra)

    handles = Handles(placement_group=group)
    learner_slots = placement.of("learner")
    master_addr = node_ip_of_bundle(group, index[("learner", 0)]) if learner_slots[0].in_group else "127.0.0.1"
    master_port = free_port()
    for slot in learner_slots:
        cls = ray.remote(**options(slot, max_restarts=0))(Learner)
        handles.learners.append(cls.remote(cfg.learner, cfg.algorithm, model_path, rank=slot.index,
                                           world_size=len(learner_slots), master_addr=master_addr,
                                           master_port=master_port, seed=cfg.seed,
                                           total_train_steps=cfg.steps, temperature=cfg.rollout.temperature))
    for slot in placement.of("rollout"):
        cls = ray.remote(**options(slot, max_restarts=3, max_concurrency=16))(RolloutWorker)
        handles.rollouts.append(cls.remote(cfg.rollout, model_path, dtype=cfg.model.dtype,
                                           seed=cfg.seed + 1000 * slot.index, worker_index=slot.index,
                                           weight_sync=cfg.weight_sync))
    for slot in placement.of("verifier"):
        cls = ray.remote(**options(slot, max_restarts=3))(VerifierPool)
        handles.verifiers.append(cls.remote(cfg.verifier, domains=tuple(domains)))
    return handles


def shutdown(handles: Handles, timeout_s: float = 60.0) -> None:
    """Shut engines down before killing actors (a killed vLLM actor leaks /dev/shm), then free the group."""
    import ray

    calls = [h.shutdown.remote() for h in handles.rollouts + handles.learners]
    calls += [h.close.remote() for h in handles.verifiers]
    if calls:
        ray.wait(calls, num_returns=len(calls), timeout=timeout_s)
    for handle in handles.rollouts + handles.learners + handles.verifiers:
        ray.kill(handle)
    if handles.placement_group is not None:
        ray.util.remove_placement_group(handles.placement_group)
