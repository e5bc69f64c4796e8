"""Colocated (ipc) weight-sync bookkeeping on CPU: bucket flattening and its metadata, the receiver's views, the
handles keyed by GPU with the receiver's device index, and the learner's ledger that keeps buckets alive until every
engine has copied them (actors/weight_sync/ipc_buckets.py; the two CUDA calls are replaced where a test needs them)."""
from __future__ import annotations

import types

import pytest
import torch

from actors.weight_sync import ipc_buckets as ib


def _state() -> dict:
    gen = torch.Generator().manual_seed(0)
    return {"a.weight": torch.randn(10, 3, generator=gen),                       # 120 bytes
            "b.weight": torch.randn(7, generator=gen).to(torch.bfloat16),         # 14 bytes
            "c.big": torch.randn(300, generator=gen),                             # 1200 bytes: a bucket of its own
            "d.idx": torch.arange(5, dtype=torch.int64),
            "e.empty": torch.zeros(0, 4)}


def test_flatten_packs_in_order_aligned_and_unflatten_gives_the_same_tensors():
    state = _state()
    buckets = ib.flatten(state, bucket_bytes=600)
    assert [[e[0] for e in b.entries] for b in buckets] == [["a.weight", "b.weight"], ["c.big"],
                                                             ["d.idx", "e.empty"]]
    for b in buckets:
        assert b.buffer.dtype == torch.uint8 and b.buffer.dim() == 1
        assert all(offset % ib.ALIGN == 0 for _, _, _, offset, _ in b.entries)
    assert buckets[0].entries[1] == ("b.weight", "bfloat16", [7], 256, 14)
    got = [pair for b in buckets for pair in ib.unflatten(b.buffer, b.entries)]
    assert [n for n, _ in got] == list(state)
    for name, tensor in got:
        assert tensor.dtype == state[name].dtype and torch.equal(tensor, state[name])
    view = ib.unflatten(buckets[0].buffer, buckets[0].entries)[0][1]
    buckets[0].buffer.zero_()
    assert not view.any()  # views, not copies: the receiver must copy before the bucket goes


def test_export_and_load_all_carry_one_handle_per_bucket():
    shared = {}

    def share(buffer):
        shared[len(shared)] = buffer
        return {"GPU-test": len(shared) - 1}

    def rebuild(handle, device_index):
        assert device_index == 3
        return shared[handle["GPU-test"]]

    state = _state()
    channels = {"test": (share, rebuild)}
    buckets, exported = ib.export(state, 600, "test", channels)
    assert len(exported) == len(buckets) == len(shared) == 3
    loaded = {}
    stats = ib.load_all(exported, 3, lambda pairs: loaded.update({n: t.clone() for n, t in pairs}), channels)
    assert stats == {"tensors": 5, "bytes": sum(t.numel() * t.element_size() for t in state.values()), "buckets": 3}
    assert all(torch.equal(loaded[n], t) for n, t in state.items())


def test_rebuild_uses_the_receivers_device_index_and_refuses_another_gpu(monkeypatch):
    import torch.multiprocessing.reductions as reductions

    calls = []
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: types.SimpleNamespace(uuid=f"GPU-{index}"))
    monkeypatch.setattr(reductions, "rebuild_cuda_tensor", lambda *args: calls.append(args) or "buffer")
    handle = {"GPU-1": ("cls", (8,), (1,), 0, torch.uint8, 0, 5, "handle", 8, 0, "ref", 0, "ev", False)}
    assert ib.rebuild_cuda(handle, 1) == "buffer"
    assert calls[0][6] == 1 and calls[0][7] == "handle"  # the learner's device 5 replaced by this engine's 1
    with pytest.raises(ValueError, match="same GPU"):
        ib.rebuild_cuda(handle, 0)


def test_shm_channel_round_trip_and_the_files_go_when_the_ledger_frees_them():
    import os

    state = _state()
    buckets, exported = ib.export(state, 600, "shm")
    paths = [item["handle"]["path"] for item in exported]
    assert all(os.path.exists(p) for p in paths)
    loaded = {}
    ib.load_all(exported, None, lambda pairs: loaded.update({n: t.clone() for n, t in pairs}))
    assert all(torch.equal(loaded[n], t) for n, t in state.items())
    ledger = ib.ExportLedger()
    ledger.add("v1", buckets, ["rollout[0]"], free=lambda: ib.remove_shm(exported))
    assert ledger.release("v1", "rollout[0]") is True
    assert not any(os.path.exists(p) for p in paths)
    with pytest.raises(ValueError, match="engine on the learner's node"):
        ib.load_all(exported, None, lambda pairs: None)


def test_ledger_keeps_buckets_until_every_engine_has_copied_them():
    ledger = ib.ExportLedger(keep=1)
    freed = []
    ledger.add("v1", ["bucket"], ["rollout[0]", "rollout[1]"], free=lambda: freed.append("v1"))
    assert ledger.release("v1", "rollout[0]") is False and ledger.held() == {"v1": ["rollout[1]"]} and not freed
    assert ledger.release("v1", "rollout[1]") is True and ledger.held() == {} and freed == ["v1"]
    ledger.add("v2", ["bucket"], ["rollout[0]"])
    ledger.add("v3", ["bucket"], ["rollout[0]"])  # a newer export frees an older one that an engine never released
    assert ledger.held() == {"v3": ["rollout[0]"]}
    ledger.drop("v3")
    assert ledger.held() == {} and ledger.release("v3", "rollout[0]") is False
    with pytest.raises(ValueError, match="already held"):
        ledger.add("v4", [], ["r"]) or ledger.add("v4", [], ["r"])


def test_bad_input_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="bucket_bytes must be > 0"):
        ib.flatten(_state(), 0)
    buffer = torch.zeros(512, dtype=torch.uint8)
    with pytest.raises(ValueError, match="'float99' is not a torch dtype"):
        ib.unflatten(buffer, [("w", "float99", [2], 0, 8)])
    with pytest.raises(ValueError, match="outside a 512-byte bucket"):
        ib.unflatten(buffer, [("w", "float32", [200], 0, 800)])
    with pytest.raises(ValueError, match="IPC channel 'pigeon' is not one of"):
        ib.export(_state(), 600, "pigeon")
    with pytest.raises(ValueError, match="IPC channel None is not one of"):
        ib.load_all([{"handle": {}, "entries": []}], 0, lambda pairs: None)
