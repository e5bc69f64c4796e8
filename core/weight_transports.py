"""The weight transports a run can name (`weight_sync.backend`): each name, the class that implements it and what it is
for. The config check and `--help` read the names from here; actors/weight_sync/transport.py resolves a name to its
class (the interface every transport implements is described there).

A name maps to a dotted path (`package.module:Class`), so this table imports nothing: it is pure, stdlib only. A
transport is added by writing its file under actors/weight_sync/ and one line here, or, for user code outside the
repository, by naming its class as a dotted path in `weight_sync.backend` (checked before any actor starts:
`check_transport`).
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


def is_dotted_path(value: str) -> bool:
    """Whether a `weight_sync.backend` value names user code (`package.module:Class`) rather than a registered name."""
    return ":" in str(value)


def transport_path(name: str) -> str:
    """The dotted path of transport `name`'s class (a dotted path is its own); ValueError naming the known ones for
    another name."""
    if is_dotted_path(name):
        return name
    if name not in TRANSPORTS:
        raise ValueError(f"weight_sync.backend={name!r} is not one of {list(TRANSPORTS)} nor a dotted path "
                         f"'package.module:Class' to a transport")
    return TRANSPORTS[name][0]


def fits_transport(obj) -> str:
    """"" when `obj` looks like a transport class (actors/weight_sync/transport.py: a class with a `name`, a
    `deliver` method and a `receiver` class), else the reason."""
    if not isinstance(obj, type):
        return f"is a {type(obj).__name__}, not a transport class"
    missing = [part for part, ok in (("name", isinstance(getattr(obj, "name", None), str)),
                                     ("deliver", callable(getattr(obj, "deliver", None))),
                                     ("receiver", isinstance(getattr(obj, "receiver", None), type))) if not ok]
    return (f"class {obj.__name__} lacks {', '.join(missing)} (a transport subclasses "
            f"actors.weight_sync.transport.Transport: name, deliver, receiver, sender)") if missing else ""


def check_transport(value: str, user_code: bool = True) -> str:
    """"" when `weight_sync.backend=value` is usable, else the reason: a registered name, or a dotted path whose class
    imports and fits (imported only with `user_code`)."""
    if value in TRANSPORTS:
        return ""
    if not is_dotted_path(value):
        return f"is not one of {list(TRANSPORTS)} nor a dotted path 'package.module:Class' to a transport"
    if not user_code:
        return ""
    from core.plugins import PluginError, load_object

    try:
        load_object(value, "weight_sync.backend", fits_transport)
    except PluginError as err:
        return err.reason
    return ""


def transports_help() -> str:
    """`weight_sync.backend`'s help text: every name with its line."""
    return ("; ".join(f"'{name}' ({line})" for name, (_, line) in TRANSPORTS.items())
            + "; or a dotted path 'package.module:Class' to your own transport (actors/weight_sync/transport.py).")
