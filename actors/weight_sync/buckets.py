"""How a model's weights are split into buckets of about `weight_sync.transport.bucket_mb` for a sync: the
object-store path's safetensors files (object_store.py) and the colocated path's IPC buffers (ipc_buckets.py). Pure."""
from __future__ import annotations


def plan_buckets(sizes: dict, bucket_bytes: int) -> list:
    """Split tensor names (in the given order) into buckets of at most `bucket_bytes` each.

    sizes: name -> bytes. A tensor larger than a bucket gets a bucket of its own. Layers may straddle
    buckets: the receiving session processes a layer when its last tensor arrives.
    """
    buckets, current, used = [], [], 0
    for name, size in sizes.items():
        if current and used + size > bucket_bytes:
            buckets.append(current)
            current, used = [], 0
        current.append(name)
        used += size
    if current:
        buckets.append(current)
    return buckets
