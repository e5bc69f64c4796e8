"""The gloo weight group for real between processes: set-up, metadata order, per-tensor values, a missed deadline,
a group rebuilt with a restarted member, a member that never joins (actors/weight_sync/broadcast_comm.py).

Each member is its own Python process (tests/actors/helpers_weight_peer.py) talking over TCP on loopback.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.net import rendezvous_port

HERE = Path(__file__).resolve().parent
REPO = str(HERE.parents[1])
PEER = str(HERE / "helpers_weight_peer.py")
sys.path.insert(0, str(HERE))
import helpers_weight_peer as peer  # noqa: E402


def _start(role: str, port: int, rank: int, world: int, timeout_s: float, *extra) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, PEER, role, str(port), str(rank), str(world), str(timeout_s),
                             *map(str, extra)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _result(proc: subprocess.Popen, wait_s: float = 120) -> dict:
    out, err = proc.communicate(timeout=wait_s)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, f"peer failed (rc {proc.returncode}):\n{out}\n{err[-3000:]}"
    return json.loads(lines[-1])


def _expected() -> list:
    return [[name, str(t.dtype).removeprefix("torch."), list(t.shape), peer.digest(t)]
            for name, t in peer.tensors().items()]


def test_group_delivers_every_tensor_in_metadata_order():
    port = rendezvous_port("")
    procs = [_start("send", port, 0, 3, 60)] + [_start("recv", port, r, 3, 60) for r in (1, 2)]
    sent, *received = [_result(p) for p in procs]
    assert sent == {"sent": {"tensors": 6, "bytes": sum(t.numel() * t.element_size()
                                                        for t in peer.tensors().values())}}
    for r in received:
        assert r == {"received": _expected()}  # names, dtypes, shapes and bytes, in the sender's order


def test_missed_deadline_closes_the_group_and_a_rebuilt_group_delivers():
    timeout_s = 6.0
    port = rendezvous_port("")
    send, stalled = _start("send", port, 0, 2, timeout_s), _start("recv", port, 1, 2, timeout_s, 2)
    out = _result(send)
    assert "timeout" in out, out
    assert "missed its deadline" in out["timeout"] and "group closed" in out["timeout"]
    assert 0 <= out["past_deadline_s"] < 1.0  # at the deadline, not at the end of the stalled peer's sleep
    stalled.kill()  # the engine that fell behind is restarted: a new group with a fresh member
    stalled.communicate()
    port = rendezvous_port("")
    procs = [_start("send", port, 0, 2, 60), _start("recv", port, 1, 2, 60)]
    sent, received = [_result(p) for p in procs]
    assert sent["sent"]["tensors"] == 6 and received == {"received": _expected()}


def test_member_that_never_joins_fails_the_setup_at_the_deadline():
    started = time.monotonic()
    out = _result(_start("send", rendezvous_port(""), 0, 2, 3))
    assert "could not form the group within 3 s" in out["timeout"], out
    assert time.monotonic() - started < 30


def test_bad_input_is_refused_with_the_reason():
    import torch

    from actors.weight_sync.broadcast_comm import BroadcastTimeout, open_group, receive_tensors

    with pytest.raises(ValueError, match="not one of"):
        open_group("mpi", "127.0.0.1", 1, 0, 2, 5)
    with pytest.raises(ValueError, match="outside a weight group of 2"):
        open_group("gloo", "127.0.0.1", 1, 2, 2, 5)
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        open_group("gloo", "127.0.0.1", 1, 0, 2, 0)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        open_group("nccl", "127.0.0.1", rendezvous_port(""), 0, 1, 5, device="cpu")
    comm = open_group("gloo", "127.0.0.1", rendezvous_port(""), 0, 1, 5)  # a group of one: rank 0 alone
    with pytest.raises(ValueError, match="'float99' is not a torch dtype"):
        list(receive_tensors(comm, [("w", "float99", [2])], "cpu", time.monotonic() + 5))
    with pytest.raises(BroadcastTimeout, match="deadline had passed"):
        comm.broadcast(torch.zeros(2), 0, time.monotonic() - 1)
    with pytest.raises(RuntimeError, match="was closed"):
        comm.broadcast(torch.zeros(2), 0, time.monotonic() + 5)


def test_the_deepspeed_learner_broadcasts_its_full_state_over_gloo(rollout_model_path, tmp_path):
    """The real Learner (DeepSpeed, its own gloo process group) as rank 0 of a separate weight group: every tensor of
    `weight_metadata()` arrives, in order, byte for byte, and the learner's own group is untouched."""
    import torch

    from actors.learner.learner import Learner
    from actors.weight_sync.broadcast import BroadcastSender
    from core.config import AlgorithmConfig, LearnerConfig
    from core.net import free_port

    learner = Learner(LearnerConfig(lr=1e-3, micro_batch_tokens=256, step_timeout_s=60.0),
                      AlgorithmConfig(ratio_reference="behaviour"), rollout_model_path, master_port=free_port())
    try:
        meta = learner.weight_metadata()
        state = {k: v.clone() for k, v in learner._sender(BroadcastSender)._state_to_send.items()}
        (tmp_path / "meta.json").write_text(json.dumps(meta))
        port = rendezvous_port("")
        receiver = _start(f"recv:{tmp_path / 'meta.json'}", port, 1, 2, 60)
        learner.init_weight_update_group("127.0.0.1", port, 2, "gloo", 60)
        sent = learner.broadcast_weights(60)
        got = _result(receiver)["received"]
        assert sent["tensors"] == len(meta) == len(got) and "lm_head.weight" in [m[0] for m in meta]
        assert got == [[n, d, s, peer.digest(state[n])] for n, d, s in meta]
        learner.close_weight_update_group()
        assert torch.distributed.get_world_size() == 1  # DeepSpeed's own group is still there
    finally:
        learner.shutdown()
