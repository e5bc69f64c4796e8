"""Launching a run's actors: `launch(...)` checks the plan against the nodes (`place`: cluster/layout.py, and with a
topology the live nodes too, cluster/live.py), creates the placement group, waits for it with a timeout, and applies
`ray.remote(**options)` to the plain actor classes (plain, so the same class can also back a Serve deployment);
`launch_rollouts` starts sampling engines alone; `shutdown` stops them all.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from cluster.layout import fit_nodes, live_nodes, target_nodes
from cluster.live import check_live, describe_nodes
from cluster.placement import (ActorSlot, PlacementError, actor_options, bundle_indices, create_group,
                               node_ip_of_bundle, plan)
from cluster.placement import actor_env as env_of
from core.net import rendezvous_port


@dataclass
class Handles:
    """Live actor handles of a run, and the placement group holding them."""
    learners: list = field(default_factory=list)
    rollouts: list = field(default_factory=list)
    verifiers: list = field(default_factory=list)
    placement_group: Any = None


def launch(cfg, model_path: str, actor_env: dict, domains: tuple = ("math",), frozen: dict | None = None,
           response_form=None) -> Handles:
    """Start every actor of `cfg` (a TrainConfig) on the running Ray cluster; PlacementError if it cannot fit.
    `frozen`: the entries of the model that never train (core/frozen.py), handed to every learner rank;
    `response_form`: how the rollout workers sample a selection task's group (actors/rollout/response_forms.py; None:
    free text), handed to every verifier too, which credits what the form's reward reads beyond the final judgment
    (`ResponseForm.credited_candidates`; actors/verifier/verifier_pool.py).

    Rollout actors are restartable (Ray restarts a dead one; the driver re-issues its prompts and pushes the
    current weights into it); learner ranks are not (a learner failure stops the run; resume=auto goes on).
    """
    import ray

    from actors.learner.learner import Learner
    from actors.verifier.verifier_pool import VerifierPool

    placement = plan(cfg.learner, cfg.rollout, cfg.verifier, cfg.cluster)
    group = place(placement, cfg.cluster)
    index = bundle_indices(placement)

    def options(slot: ActorSlot, **extra) -> dict:
        return actor_options(slot, group, index.get((slot.role, slot.index)),
                             runtime_env={"env_vars": env_of(slot, actor_env)}, **extra)

    handles = Handles(placement_group=group)
    colocated = cfg.weight_sync.transport.get("name") == "ipc"
    if colocated:  # the engine measures the GPU's free memory at its start: it starts before the learner shares it
        _start_rollouts(handles, placement, options, cfg, model_path, response_form)
        try:
            ray.get([h.health.remote() for h in handles.rollouts], timeout=cfg.cluster.actor_start_timeout_s)
        except BaseException:
            shutdown(handles)  # the engines and the placement group, before the error reaches the driver
            raise
    learner_slots = placement.of("learner")
    master_addr = node_ip_of_bundle(group, index[("learner", 0)]) if learner_slots[0].in_group else "127.0.0.1"
    master_port = rendezvous_port("")  # every interface: the ranks rendezvous on the node address, not loopback
    for slot in learner_slots:
        cls = ray.remote(**options(slot, max_restarts=0))(Learner)
        handles.learners.append(cls.remote(cfg.learner, cfg.algorithm, model_path, rank=slot.index,
                                           world_size=len(learner_slots), master_addr=master_addr,
                                           master_port=master_port, seed=cfg.seed,
                                           total_train_steps=cfg.steps, temperature=cfg.rollout.temperature,
                                           frozen=frozen))
    if not colocated:
        _start_rollouts(handles, placement, options, cfg, model_path, response_form)
    for slot in placement.of("verifier"):
        cls = ray.remote(**options(slot, max_restarts=3))(VerifierPool)
        handles.verifiers.append(cls.remote(cfg.verifier, domains=tuple(domains), response_form=response_form))
    return handles


def place(placement, cluster_cfg):
    """The placement group of `placement`, once the run is known to fit: PlacementError naming what is missing,
    before any actor starts, when the nodes it is pointed at cannot hold it (cluster/layout.py) or, with a
    topology, when the live nodes cannot and no autoscaler can add nodes (cluster/live.py); after
    `cluster.placement_timeout_s` when the group is still not placed, with what the live nodes lack then."""
    live = live_nodes()
    nodes, _ = target_nodes(cluster_cfg, live)
    fit_nodes(placement, nodes)
    if cluster_cfg.topology:
        local = not (cluster_cfg.address or os.environ.get("RAY_ADDRESS"))  # as driver/run.py starts Ray
        check_live(placement, cluster_cfg, local=local, live=live)
    try:
        return create_group(placement, cluster_cfg.placement_timeout_s)
    except PlacementError as err:
        now = live_nodes()
        try:
            fit_nodes(placement, now)
            why = "the alive nodes could hold it: other work holds the resources"
        except PlacementError as short:
            why = f"{describe_nodes(now)}: {short}"
        raise PlacementError(f"{err}; {why}") from None


def _start_rollouts(handles: Handles, placement, options, cfg, model_path: str, response_form=None) -> None:
    """Create the rollout actors of `placement` (restartable) into `handles.rollouts`, each sampling with
    `response_form` (actors/rollout/response_forms.py; None: free text)."""
    import ray

    from actors.rollout.rollout_worker import RolloutWorker

    for slot in placement.of("rollout"):
        cls = ray.remote(**options(slot, max_restarts=3, max_concurrency=16))(RolloutWorker)
        handles.rollouts.append(cls.remote(cfg.rollout, model_path, dtype=cfg.model.dtype,
                                           seed=cfg.seed + 1000 * slot.index, worker_index=slot.index,
                                           weight_sync=cfg.weight_sync, response_form=response_form))


def launch_rollouts(rollout_cfg, model_path: str, dtype: str, seed: int, actor_env: dict) -> Handles:
    """Rollout actors only (`rollout_cfg.num_workers` vLLM engines of `model_path`), each with its own
    resources and no placement group: sampling jobs that train nothing (model-sampled candidates,
    driver/data/generated.py). Shut them down with `shutdown`."""
    import ray

    from actors.rollout.rollout_worker import RolloutWorker

    handles = Handles()
    for index in range(rollout_cfg.num_workers):
        slot = ActorSlot("rollout", index, rollout_cfg.num_cpus, rollout_cfg.num_gpus, "")
        cls = ray.remote(num_cpus=rollout_cfg.num_cpus, num_gpus=rollout_cfg.num_gpus, max_restarts=0,
                         max_concurrency=16, runtime_env={"env_vars": env_of(slot, actor_env)})(RolloutWorker)
        handles.rollouts.append(cls.remote(rollout_cfg, model_path, dtype=dtype, seed=seed + 1000 * index,
                                           worker_index=index))
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
