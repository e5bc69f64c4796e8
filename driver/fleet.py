"""A run's actors, the policy version their engines serve, the deadline of every call to them, their recovery.

`Fleet` holds the handles `cluster.launch` started (rollout engines, verifier pools, learner ranks) and the weight
sync (actors/weight_sync/coordinator.py). `call` waits for actor calls under a deadline (a failure is a `RunFailed`
naming what failed, the resources no node can give back, and how to continue); `restore_worker` is the recovery a restarted
rollout engine needs (wait until Ray restarted it, push the current weights). The calls of a step's stages 5 and 6
are in driver/step.py.
"""
from __future__ import annotations

from pathlib import Path

from driver.failure import RunFailed, error_summary, how_to_continue


class Fleet:
    """A run's actors (cluster.launch.Handles), its weight sync and the policy version the engines serve."""

    def __init__(self, cfg, handles, broadcaster, run_dir: Path):
        self.cfg, self.handles, self.broadcaster, self.run_dir = cfg, handles, broadcaster, Path(run_dir)
        self.version = 0
        self.sync_retries = 0  # weight syncs retried after a rollout engine died (metric rollout/sync_retries)
        self._watch = None

    @property
    def num_learners(self) -> int:
        return len(self.handles.learners)

    def call(self, refs: list, timeout: float, what: str) -> list:
        """`ray.get(refs)` under `timeout`; an actor's death or error, or the deadline, is a RunFailed naming `what`,
        the resources no node can give back (an actor's node died), and how to continue."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        try:
            return ray.get(refs, timeout=timeout)
        except (RayActorError, RayTaskError, GetTimeoutError) as err:
            lost = self.placement_watch().unplaceable()
            why = f"; {'; '.join(lost)}" if lost else ""
            raise RunFailed(f"{what} failed ({error_summary(err)}){why}; {how_to_continue(self.run_dir)}") from err

    # -- recovery ----------------------------------------------------------------------------------------------
    def restore_worker(self, worker: int) -> None:
        """A rollout actor died or hung: wait for Ray to restart it, then push the current weights."""
        from driver.step import sync_weights  # torch: only where a step runs

        self.wait_for_rollouts()
        sync_weights(self, self.version)

    def wait_for_rollouts(self, timeout_s: float = 300.0) -> None:
        """Wait until every rollout actor answers again (Ray restarts a dead one, on another node if its own died).
        Stop early, naming the missing resources, when a restarted actor cannot be placed: its node died and no
        alive node can take its bundle for cluster.placement_timeout_s (cluster/recovery.py)."""
        from cluster.recovery import LostPlacement, wait_for_actors

        try:
            wait_for_actors(self.handles.rollouts, self.placement_watch(), timeout_s)
        except LostPlacement as err:
            raise RunFailed(f"{err}. Once a node that can take it is back: {how_to_continue(self.run_dir)}") from None
        except TimeoutError:
            raise RunFailed(f"a rollout actor did not come back within {timeout_s:g} s; "
                            f"{how_to_continue(self.run_dir)}") from None

    def placement_watch(self):
        """The run's PlacementWatch (cluster/recovery.py), made once."""
        if self._watch is None:
            from cluster.placement import plan
            from cluster.recovery import PlacementWatch

            c = self.cfg
            self._watch = PlacementWatch(plan(c.learner, c.rollout, c.verifier, c.cluster),
                                         self.handles.placement_group, c.cluster.placement_timeout_s)
        return self._watch
