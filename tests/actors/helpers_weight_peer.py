"""One member of a gloo weight group in its own process, for tests/actors/test_weight_comm.py.

python helpers_weight_peer.py ROLE PORT RANK WORLD TIMEOUT_S [STALL_AFTER]
ROLE send: rank 0 broadcasts `tensors(seed=1)` in order; prints {"sent": ...} or {"timeout": message, "after_s",
"past_deadline_s" (how long after the broadcast's deadline it returned; None when the set-up failed)}.
ROLE recv: receives `metadata()` in order; prints {"received": [[name, dtype, shape, sha256 of the bytes], ...]};
with STALL_AFTER=k it stops after k tensors and sleeps (a receiver that fell behind).
ROLE recv:FILE: the same for the metadata in the JSON file FILE ([[name, dtype, shape], ...], a learner's).
"""
from __future__ import annotations

import hashlib
import json
import sys
import time


def tensors(seed: int = 1) -> dict:
    """name -> tensor: mixed dtypes and shapes, a scalar and an empty tensor included."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return {"model.embed_tokens.weight": torch.randn(64, 16, generator=gen),
            "model.layers.0.mlp.up_proj.weight": torch.randn(32, 16, generator=gen).to(torch.bfloat16),
            "model.norm.weight": torch.randn(16, generator=gen),
            "step": torch.tensor(7, dtype=torch.int64),
            "empty": torch.zeros(0, 3),
            "lm_head.weight": torch.randn(64, 16, generator=gen).half()}


def metadata() -> list:
    return [(name, str(t.dtype).removeprefix("torch."), list(t.shape)) for name, t in tensors().items()]


def digest(t) -> str:
    import torch

    data = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return hashlib.sha256(data).hexdigest()


def main(role: str, port: int, rank: int, world: int, timeout_s: float, stall_after: int = -1) -> None:
    from actors.weight_sync.broadcast_comm import BroadcastTimeout, open_group, receive_tensors, send_tensors

    start, deadline = time.monotonic(), None
    try:
        comm = open_group("gloo", "127.0.0.1", port, rank, world, timeout_s)
        deadline = time.monotonic() + timeout_s
        if role == "send":
            out = {"sent": send_tensors(comm, tensors().values(), deadline)}
        else:
            got = []
            meta = metadata() if role == "recv" else json.loads(open(role.split(":", 1)[1]).read())
            for i, (name, t) in enumerate(receive_tensors(comm, meta, "cpu", deadline)):
                got.append([name, str(t.dtype).removeprefix("torch."), list(t.shape), digest(t)])
                if i + 1 == stall_after:
                    time.sleep(3 * timeout_s)
                    break
            out = {"received": got}
        comm.close()
    except BroadcastTimeout as err:
        now = time.monotonic()
        out = {"timeout": str(err), "after_s": now - start,
               "past_deadline_s": None if deadline is None else now - deadline}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]),
         *(int(a) for a in sys.argv[6:]))
