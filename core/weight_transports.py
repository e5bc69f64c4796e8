"""The weight transports a run can name (`weight_sync.backend`): each name, the class that implements it and what it is
for. The config check and `--help` read the names from here; actors/weight_sync/transport.py resolves a name to its
class (the interface every transport implements is described there).

A name maps to a dotted path (`package.module:Class`), so this table imports nothing: it is pure, stdlib only. A
transport is added by writing its file under actors/weight_sync/ and one line here.
"""
from __future__ import annotations

#: name -> (dotted path of the transport class, one line for `--help`)
TRANSPORTS = {
    "object_store": ("actors.weight_sync.object_store:ObjectStoreTransport",
                     "the CPU default: the learner's arrays through Ray's object store"),
    "gloo": ("actors.weight_sync.broadcast:GlooTransport", "a broadcast group over TCP, CPU or GPU"),
    "nccl": ("actors.weight_sync.broadcast:NcclTransport", "a broadcast group of GPU learner and engines"),
    "ipc": ("actors.weight_sync.ipc:IpcTransport",
            "learner and engine colocated on one GPU: CUDA IPC handles, one per bucket"),
}


def transport_names() -> tuple:
    """The names `weight_sync.backend` accepts, in the table's order."""
    return tuple(TRANSPORTS)


def transport_path(name: str) -> str:
    """The dotted path of transport `name`'s class; ValueError naming the known ones for another name."""
    if name not in TRANSPORTS:
        raise ValueError(f"weight_sync.backend={name!r} is not one of {list(TRANSPORTS)}")
    return TRANSPORTS[name][0]


def transports_help() -> str:
    """`weight_sync.backend`'s help text: every name with its line."""
    return "; ".join(f"'{name}' ({line})" for name, (_, line) in TRANSPORTS.items()) + "."
