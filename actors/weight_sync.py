"""Weight sync: learner rank 0 -> every rollout engine, one version at a time, under one deadline.

Every learner rank takes part in each export (under ZeRO-3 the parameter gather is collective: a gather on
rank 0 alone waits forever for the others); only rank 0's copy travels.

object_store backend (the CPU default). The learner exports its full HF-named state dict as numpy
arrays in its training dtype (`export_weights(rank0_only=True, widen=False) -> dict[str, np.ndarray]`; bf16 as
marked uint16 bit patterns, never widened to float32, `lm_head.weight` included for tied models) into
Ray's object store once; the broadcaster hands the same ObjectRef to every rollout actor's
`update_weights_from_object_store(ref, version)`. Ray resolves a top-level ObjectRef argument before
the call, and numpy arrays are read zero-copy from shared memory on the same node, so the driver never
touches the weights and there is no per-parameter `ray.get`. Each rollout actor then pushes the arrays
into its engine through /dev/shm safetensors buckets (actors/rollout.py, actors/vllm_extension.py).

gloo and nccl backends (a broadcast group). Protocol, following vLLM's RLHF example: the learner (rank 0) and every
engine worker join one weight group (actors/weight_comm.py; `learner.init_weight_update_group(addr, port, world_size,
backend, timeout_s)`, `rollout.init_weight_update_group(addr, port, rank_offset, world_size, backend, timeout_s,
group_id)`); per sync the rollouts enter `update_weights_broadcast(metadata, version, group_id, timeout_s)` while the
learner runs `broadcast_weights(timeout_s)`, which broadcasts every tensor of `weight_metadata()` in order (learner
side: actors/weight_sender.py). Each member stops at the sync's deadline by itself and closes its group, so a missed
deadline leaves no one inside a half-finished broadcast; the broadcaster then forgets the group, and the next sync
forms a new one, as it does when an engine is not in the current group (a restarted actor). gloo runs over TCP on
CPU (tests/actors/test_weight_broadcast.py); nccl is the same protocol on GPUs (not run here: it needs two GPUs).

ipc backend (one GPU shared by learner rank 0 and one engine; not run here: it needs a GPU). The learner flattens its
weights into buckets on its GPU and exports one CUDA IPC handle per bucket (`export_ipc`, actors/ipc_buckets.py); the
engine opens them on its own device index and loads them inside the same drain / load / resume path as the
object-store path (`update_weights_ipc`), under the same deadline and missing-parameter check; the learner keeps the
buckets until every engine has released them and frees them when the sync ends either way. The object-store backend
works colocated too, as the fallback.

Every sync has one deadline (`WeightSyncConfig.timeout_s`, derived from the generation limits unless set:
core/deadlines.py); a miss raises WeightSyncTimeout naming the actors that did not answer, after cancelling their
late update calls: an engine still draining (waiting for its in-flight requests) keeps its old weights and
version and serves again; one inside its reload session finishes it (new version) or is marked failed. Each
engine's outcome is in `WeightSyncTimeout.engines`, so the next sync starts from a known state. The learner holds
no sync state on this backend (an export is a read of its weights). Every sync's stats split drain, transfer and
load time (`sync`).
"""
from __future__ import annotations

import time
import uuid

import ray

from actors.calls import answer_times

BACKENDS = ("object_store", "gloo", "nccl", "ipc")
BROADCAST_BACKENDS = ("gloo", "nccl")  # the weights travel by a broadcast inside the engines' load session
ABANDON_WAIT_S = 60.0  # how long `_abandon` waits for each engine's state after a missed deadline
ANSWER_GRACE_S = 15.0  # broadcast backends: members stop at the deadline themselves; time for their answer to arrive


class WeightSyncTimeout(TimeoutError):
    """A sync missed its deadline; `pending` names the actors that had not answered; `engines` holds each
    engine's `update_state()` after the late calls were cancelled (object_store backend)."""

    def __init__(self, message: str, pending: list):
        super().__init__(message)
        self.pending = pending
        self.engines: list = []


class WeightSyncFailed(RuntimeError):
    """A broadcast sync failed before its deadline (an engine outside the group, an error in a member); same fields
    as WeightSyncTimeout."""

    def __init__(self, message: str, pending: list):
        super().__init__(message)
        self.pending = pending
        self.engines: list = []


class WeightSyncBroadcaster:
    """Driver-side coordinator: `sync(version)` pushes the learner's current weights to every engine."""

    def __init__(self, cfg, learners, rollout_handles: list, board=None):
        """cfg: WeightSyncConfig; learners: every learner rank's actor, in rank order (or a single handle when
        there is one rank): gathering ZeRO-3 weights is collective, so every rank takes part in an export and
        rank 0's copy is sent; rollout_handles: RolloutWorker actors (update_weights_from_object_store);
        board: an optional WeightBoard actor (actors/weight_board.py): every synced version is published there
        too, and the serving replicas that follow it load the same weights (`serve.live`)."""
        if cfg.backend not in BACKENDS:
            raise ValueError(f"weight_sync.backend={cfg.backend!r}: this broadcaster implements {list(BACKENDS)}")
        self.cfg = cfg
        self.learners = list(learners) if isinstance(learners, (list, tuple)) else [learners]
        self.learner = self.learners[0]
        self.rollouts = list(rollout_handles)
        self.board = board
        self.history: list = []
        self._group = None  # id of the weight group of the broadcast backends; None: form one at the next sync

    def sync(self, version: int) -> dict:
        """Push the learner's weights to every rollout engine and set their policy version.

        Returns {"version", "seconds", "bytes" (per engine), "gbps" (GB/s = bytes / seconds / 1e9, per engine),
        "export_seconds", "drain_s", "transfer_s", "load_s", "workers": per-engine stats}, where the three phases
        of a sync are split (slowest engine each; they add up to about `seconds`):
        - drain_s: waiting for the generation requests in flight in the engine to finish (the engine's pause);
        - transfer_s: moving the weights: the learner's export into the object store plus their delivery to the
          engine's actor (the call's round trip less the time the engine spent in it); with gloo/nccl, the broadcast;
        - load_s: loading them into the engine (bucket files, the engine's reload, the prefix-cache reset).
        Raises WeightSyncTimeout past the deadline, after leaving every engine in a defined state (see `_abandon`).
        """
        start = time.perf_counter()
        deadline = start + self.cfg.timeout_s
        if self.cfg.backend in BROADCAST_BACKENDS:
            workers, export_s = self._sync_broadcast(version, deadline), 0.0
            rtts = [w.get("seconds", 0.0) for w in workers]
        elif self.cfg.backend == "ipc":
            workers, export_s, rtts = self._sync_ipc(version, start, deadline)
        else:
            refs = [learner.export_weights.remote(rank0_only=True, widen=False) for learner in self.learners]
            self._wait(refs, [f"learner[{r}].export_weights" for r in range(len(refs))], deadline,
                       fetch_local=False)
            ref = refs[0]
            export_s = time.perf_counter() - start
            sent = time.perf_counter()
            calls = [h.update_weights_from_object_store.remote(ref, version) for h in self.rollouts]
            workers, ends = self._wait_timed(calls, self._names("update_weights_from_object_store"), deadline,
                                             version)
            rtts = [end - sent for end in ends]
            if self.board is not None:  # the ref travels inside a list, so Ray passes it on unresolved
                self._wait([self.board.publish.remote(version, {"kind": "object_ref", "ref": [ref]})],
                           ["weight board publish"], deadline)
        seconds = time.perf_counter() - start
        nbytes = max((w.get("bytes", 0) for w in workers), default=0)
        drain = [w.get("drain_s", w.get("pause_s", 0.0)) for w in workers]
        load = [w.get("load_s", 0.0) for w in workers]
        delivery = [max(0.0, rtt - w.get("seconds", 0.0)) for rtt, w in zip(rtts, workers)]
        if self.cfg.backend in BROADCAST_BACKENDS:  # the broadcast happens inside the engine's load session
            delivery = [w.get("load_s", 0.0) for w in workers]
        stats = {"version": version, "seconds": seconds, "bytes": nbytes,
                 "gbps": nbytes / seconds / 1e9 if seconds > 0 else 0.0, "export_seconds": export_s,
                 "drain_s": max(drain, default=0.0), "transfer_s": export_s + max(delivery, default=0.0),
                 "load_s": max(load, default=0.0) if self.cfg.backend not in BROADCAST_BACKENDS else 0.0,
                 "workers": workers}
        self.history.append({k: v for k, v in stats.items() if k != "workers"})
        return stats

    def _names(self, method: str) -> list:
        return [f"rollout[{i}] ({_actor_id(h)}).{method}" for i, h in enumerate(self.rollouts)]

    def _wait(self, refs: list, names: list, deadline: float, fetch_local: bool = True) -> list:
        """ray.wait for all refs until `deadline`; WeightSyncTimeout naming the late ones; else results."""
        timeout = max(0.0, deadline - time.perf_counter())
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout, fetch_local=fetch_local)
        if pending:
            late = [name for ref, name in zip(refs, names) if ref in pending]
            raise WeightSyncTimeout(f"weight sync exceeded timeout_s={self.cfg.timeout_s:g}: no answer "
                                    f"from {', '.join(late)}", late)
        return ray.get(refs) if fetch_local else []

    def _wait_timed(self, refs: list, names: list, deadline: float, version: int) -> tuple:
        """Like `_wait` for the engines' update calls, also returning when each answered; past the deadline
        the late calls are abandoned (`_abandon`) before WeightSyncTimeout is raised."""
        ends, pending = answer_times(refs, deadline)
        if pending:
            late = [name for ref, name in zip(refs, names) if ref in pending]
            err = WeightSyncTimeout(f"weight sync to version {version} exceeded timeout_s="
                                    f"{self.cfg.timeout_s:g}: no answer from {', '.join(late)}", late)
            self._abandon(refs, pending, err)
            raise err
        return ray.get(refs), [ends[r] for r in refs]

    def _abandon(self, refs: list, pending: list, err: WeightSyncTimeout) -> None:
        """Leave every engine in a defined state after a missed deadline: cancel the late update calls (an
        engine still draining resumes on its old weights and version; one inside its reload session finishes
        it first, so it holds either the new weights or is marked failed), then ask each engine where it
        stands. `err.engines` gets one `update_state()` per engine ({"error": ...} where it did not answer)
        and the message says which version each engine serves."""
        for ref in pending:
            ray.cancel(ref)
        states = []
        for i, h in enumerate(self.rollouts):
            try:
                states.append(ray.get(h.update_state.remote(), timeout=ABANDON_WAIT_S))
            except Exception as e:  # a dead or hung actor: the driver restarts it
                states.append({"state": "unknown", "error": f"{type(e).__name__}: {str(e)[:200]}"})
        err.engines = states
        said = "; ".join(f"rollout[{i}]: {s.get('state')}, serving version {s.get('engine_version', '?')}"
                         for i, s in enumerate(states))
        err.args = (f"{err.args[0]} ({said})",)

    def _sync_ipc(self, version: int, start: float, deadline: float) -> tuple:
        """Colocated: learner rank 0 exports one CUDA IPC handle per bucket (every rank takes part in the ZeRO-3
        gather), every engine loads them inside its drain / load / resume path under the deadline; the learner
        keeps the buckets until each engine that answered has released them, and frees them when the sync ends
        either way. Returns (per-engine stats, export seconds, round trips)."""
        export_id = f"v{version}-{uuid.uuid4().hex[:8]}"
        engines = [f"rollout[{i}]" for i in range(len(self.rollouts))]
        bucket_bytes = self.cfg.bucket_mb << 20
        refs = [learner.export_ipc.remote(export_id, bucket_bytes, engines) for learner in self.learners]
        exported = self._wait(refs, [f"learner[{r}].export_ipc" for r in range(len(refs))], deadline)[0]
        export_s = time.perf_counter() - start
        sent = time.perf_counter()
        try:
            calls = [h.update_weights_ipc.remote(exported, version) for h in self.rollouts]
            workers, ends = self._wait_timed(calls, self._names("update_weights_ipc"), deadline, version)
            ray.get([self.learner.release_ipc.remote(export_id, e) for e in engines], timeout=ABANDON_WAIT_S)
        finally:
            ray.get(self.learner.drop_ipc.remote(export_id), timeout=ABANDON_WAIT_S)
        return workers, export_s, [end - sent for end in ends]

    def _sync_broadcast(self, version: int, deadline: float) -> list:
        """gloo / nccl: one broadcast from learner rank 0 to every engine worker, in the group `_group` names.

        The group is formed again when there is none (first sync, or the last one failed) or when an engine is not
        in it (a restarted actor answers `weight_group()` None). Learner and engines each stop at the deadline on
        their own (actors/weight_comm.py closes their group), so every call answers by `deadline` plus
        `ANSWER_GRACE_S`; any failure forgets the group, leaves every engine in a known state (`_abandon`) and
        raises WeightSyncTimeout (a missed deadline) or WeightSyncFailed."""
        joined = self._wait([h.weight_group.remote() for h in self.rollouts], self._names("weight_group"), deadline)
        if self._group is None or any(g != self._group for g in joined):
            self._form_group(deadline)
        metas = self._wait([learner.weight_metadata.remote() for learner in self.learners],  # ZeRO-3: collective
                           [f"learner[{r}].weight_metadata" for r in range(len(self.learners))], deadline)
        left = max(0.0, deadline - time.perf_counter())
        receives = [h.update_weights_broadcast.remote(metas[0], version, self._group, left) for h in self.rollouts]
        refs = receives + [self.learner.broadcast_weights.remote(left)]
        names = self._names("update_weights_broadcast") + ["learner[0].broadcast_weights"]
        self._check_all(refs, names, deadline, f"weight sync to version {version}")
        return ray.get(receives)

    def _form_group(self, deadline: float) -> None:
        """Every engine worker and learner rank 0 leave the group they held and join a new one."""
        self._group = None
        address, port = self._wait([self.learner.weight_update_address.remote()],
                                   ["learner[0].weight_update_address"], deadline)[0]
        group, left = uuid.uuid4().hex[:12], max(0.0, deadline - time.perf_counter())
        world_size = 1 + len(self.rollouts)  # one worker per engine (no tensor parallelism)
        calls = [h.init_weight_update_group.remote(address, port, 1 + i, world_size, self.cfg.backend, left, group)
                 for i, h in enumerate(self.rollouts)]
        calls.append(self.learner.init_weight_update_group.remote(address, port, world_size, self.cfg.backend, left))
        self._check_all(calls, self._names("init_weight_update_group") + ["learner[0].init_weight_update_group"],
                        deadline, f"forming the {self.cfg.backend} weight group")
        self._group = group

    def _check_all(self, refs: list, names: list, deadline: float, what: str) -> None:
        """Wait for calls that stop at `deadline` by themselves; any error or late answer forgets the group,
        abandons the engines' calls and raises (WeightSyncTimeout when a deadline was missed)."""
        _, pending = answer_times(refs, deadline + ANSWER_GRACE_S)
        failures, timed_out = [], bool(pending)
        for ref, name in zip(refs, names):
            if ref in pending:
                failures.append(f"{name}: no answer")
                continue
            try:
                ray.get(ref)
            except Exception as e:
                timed_out |= isinstance(e, TimeoutError) or "BroadcastTimeout" in str(e)
                failures.append(f"{name}: {_last_line(e)}")
        if not failures:
            return
        self._group = None
        cls = WeightSyncTimeout if timed_out else WeightSyncFailed
        err = cls(f"{what} failed (timeout_s={self.cfg.timeout_s:g}; the weight group is closed and formed again "
                  f"at the next sync): {'; '.join(failures)}", [n for r, n in zip(refs, names) if r in pending])
        self._abandon(refs, pending, err)
        raise err


def _last_line(err: Exception) -> str:
    """The last line of an error's message (a RayTaskError carries the remote traceback before it)."""
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(err).__name__)[:300]


def _actor_id(handle) -> str:
    try:
        return handle._actor_id.hex()[:12]
    except AttributeError:
        return type(handle).__name__
