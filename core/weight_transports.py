"""The weight transport a config names: one section, `weight_sync.transport: {name, ...params}`.

    weight_sync:
      transport:
        name: ipc                     # a registered name (TRANSPORTS) or your own class's path
        bucket_mb: 512                # that transport's parameters; the ones left out keep their defaults

    weight_sync:
      transport:
        name: my_transports:Rdma      # your Transport subclass (actors/weight_sync/transport.py)
        rails: 4                      # any other key: a keyword argument its constructor is called with

Each registered name maps to a dotted path (`package.module:Class`), so this table imports nothing: it is pure,
stdlib only. actors/weight_sync/transport.py resolves a section to its class (the interface every transport
implements is described there) and the coordinator builds it as `cls(weight_sync_cfg, **params)`. A transport is
added by writing its file under actors/weight_sync/ and one entry here, or, for user code outside the repository, by
naming its class as a dotted path (checked before any actor starts, its constructor against the section's keys:
`check_transport`). A built-in transport's parameters are checked against its table here.

The parameters belong to the name: a config layer (a YAML file after its `base:`, or an override) that names another
transport starts the section afresh (core/config.py SECTIONS). `resolve_section` fills in a built-in transport's
defaults, so a run's config.yaml shows each parameter the run used. The keys about every sync (timeout_s,
transfer_timeout_s, check_every, check_tolerance) stay in `weight_sync` itself.

Old keys: `weight_sync.backend` and `weight_sync.bucket_mb` are refused with the new key's name (`refusal`), and a
run folder's config written with them is read with them moved (`migrate`).
"""
from __future__ import annotations

from typing import Any, Optional

from core.section_params import Param, param_rules, with_defaults

KEY = "weight_sync.transport"

#: the object store's and ipc's bucket size (the broadcast transports send tensor by tensor)
BUCKET_MB = Param(256, "Bucket size in MiB: the weights are sent in buckets of about this many bytes "
                       "(actors/weight_sync/buckets.py).")

#: name -> (dotted path of the transport class, {parameter: Param}, one line for `--help`)
TRANSPORTS = {
    "object_store": ("actors.weight_sync.object_store:ObjectStoreTransport", {"bucket_mb": BUCKET_MB},
                     "the CPU default: the learner's arrays through Ray's object store"),
    "gloo": ("actors.weight_sync.broadcast:GlooTransport", {}, "a broadcast group over TCP, CPU or GPU"),
    "nccl": ("actors.weight_sync.broadcast:NcclTransport", {}, "a broadcast group of GPU learner and engines"),
    "ipc": ("actors.weight_sync.ipc:IpcTransport", {"bucket_mb": BUCKET_MB},
            "learner and engine colocated on one GPU: CUDA IPC handles, one per bucket"),
}


def transport_names() -> tuple:
    """The registered names `weight_sync.transport.name` accepts besides a dotted path, in the table's order."""
    return tuple(TRANSPORTS)


def transport_name(section: Any) -> str:
    """The name a `weight_sync.transport` section holds: a registered name or a dotted path."""
    return str(section.get("name") or "")


def is_dotted_path(value: str) -> bool:
    """Whether a transport name is user code (`package.module:Class`) rather than a registered name."""
    return ":" in str(value)


def transport_path(name: str) -> str:
    """The dotted path of transport `name`'s class (a dotted path is its own); ValueError naming the known ones for
    another name."""
    if is_dotted_path(name):
        return name
    if name not in TRANSPORTS:
        raise ValueError(f"{KEY}.name={name!r} is not one of {list(TRANSPORTS)} nor a dotted path "
                         f"'package.module:Class' to a transport")
    return TRANSPORTS[name][0]


def resolve_section(section: Any) -> dict:
    """`section` with every default of a registered transport filled in (a class's parameters are kept as given)."""
    name = transport_name(section)
    return with_defaults(section, name, TRANSPORTS[name][1] if name in TRANSPORTS else {})


def transport_params(section: Any) -> dict:
    """The transport's keyword parameters: a built-in one's with its defaults filled in, a class's as given."""
    return {key: value for key, value in resolve_section(section).items() if key != "name"}


def bucket_bytes(section: Any) -> int:
    """The bucket size in bytes of a transport that sends in buckets (BUCKET_MB's default for one that names none,
    e.g. a class of your own that hands its arrays to the object store's receiver)."""
    return int(transport_params(section).get("bucket_mb", BUCKET_MB.default)) << 20


def fits_transport(params: tuple = ()):
    """A check: "" when the object looks like a transport class (actors/weight_sync/transport.py: a class with a
    `name`, a `deliver` method and a `receiver` class) whose constructor takes `cls(cfg, **params)`, else the
    reason."""
    from core.plugins import takes_positional

    def check(obj) -> str:
        if not isinstance(obj, type):
            return f"is a {type(obj).__name__}, not a transport class"
        missing = [part for part, ok in (("name", isinstance(getattr(obj, "name", None), str)),
                                         ("deliver", callable(getattr(obj, "deliver", None))),
                                         ("receiver", isinstance(getattr(obj, "receiver", None), type))) if not ok]
        if missing:
            return (f"class {obj.__name__} lacks {', '.join(missing)} (a transport subclasses "
                    f"actors.weight_sync.transport.Transport: name, deliver, receiver, sender)")
        return takes_positional(1, ("cfg",), params)(obj)

    return check


def section_rules(section: Any) -> list:
    """(key, ok, message) rules of the section itself: a known name or a dotted path, and a built-in transport's
    parameters (each one it takes, of its type). Whether a class imports and takes its parameters is
    `check_transport`'s."""
    name = transport_name(section)
    params = {k: v for k, v in dict(section).items() if k != "name"}
    rules = [(f"{KEY}.name", name in TRANSPORTS or is_dotted_path(name),
              f"must be one of {list(TRANSPORTS)} or a dotted path 'package.module:Class' to a transport")]
    if is_dotted_path(name) or not rules[0][1]:
        return rules
    return rules + param_rules(KEY, name, "transport", TRANSPORTS[name][1], params, user_code="class")


def check_transport(section: Any, user_code: bool = True) -> str:
    """"" when a class named by its path imports and fits (`cls(cfg, **params)`), else the reason; imported only with
    `user_code`. A registered name's section is checked by `section_rules`."""
    name = transport_name(section)
    if not is_dotted_path(name) or not user_code:
        return ""
    from core.plugins import PluginError, load_object

    try:
        load_object(name, f"{KEY}.name", fits_transport(tuple(transport_params(section))))
    except PluginError as err:
        return err.reason
    return ""


def transports_help() -> str:
    """`weight_sync.transport`'s help text: every name with its line."""
    return ("; ".join(f"'{name}' ({line})" for name, (_, _, line) in TRANSPORTS.items())
            + "; or a dotted path 'package.module:Class' to your own transport (actors/weight_sync/transport.py), "
              "built as Class(cfg, **params) with the section's other keys.")


def describe() -> list:
    """(dotted key, default, help) rows for `--help`: one per transport, then each built-in transport's parameters."""
    rows = [(f"{KEY}.name={name}", "", line) for name, (_, _, line) in TRANSPORTS.items()]
    for name, (_, table, _) in TRANSPORTS.items():
        rows += [(f"{KEY}.{param}", spec.default, f"Transport {name!r}: {spec.help}") for param, spec in table.items()]
    return rows


def old_keys_in(weight_sync: Optional[dict]) -> list:
    """The old keys a `weight_sync` subtree (nested dicts) sets: `backend`, `bucket_mb`."""
    if not isinstance(weight_sync, dict):
        return []
    return ([f"weight_sync.backend={weight_sync['backend']}"] if "backend" in weight_sync else []) + \
        (["weight_sync.bucket_mb"] if "bucket_mb" in weight_sync else [])


def refusal(old: str) -> str:
    """One line: what the old key `old` is now."""
    if old == "weight_sync.bucket_mb":
        return (f"weight_sync.bucket_mb moved to {KEY}.bucket_mb (a parameter of the transports that send in "
                f"buckets: {', '.join(n for n, (_, t, _) in TRANSPORTS.items() if 'bucket_mb' in t)})")
    return f"{old}: weight_sync.backend moved to {KEY}.name; set {KEY}.name={old.split('=', 1)[1]}"


def migrate(tree: dict) -> dict:
    """A config tree (nested dicts, a run folder's config.yaml) with the old keys moved into the section: the name is
    `backend` (object_store when absent); `bucket_mb` stays as a parameter of a transport that takes it (another
    transport never read it: it goes)."""
    weight_sync = tree.get("weight_sync") if isinstance(tree, dict) else None
    if not old_keys_in(weight_sync):
        return tree
    weight_sync = dict(weight_sync)
    backend = weight_sync.pop("backend", None)
    bucket_mb = weight_sync.pop("bucket_mb", None)
    section = dict(weight_sync.get("transport") or {"name": backend or "object_store"})
    if bucket_mb is not None and "bucket_mb" in TRANSPORTS.get(transport_name(section), ("", {}))[1]:
        section.setdefault("bucket_mb", bucket_mb)
    weight_sync["transport"] = section
    return {**tree, "weight_sync": weight_sync}


__all__ = ["KEY", "BUCKET_MB", "TRANSPORTS", "transport_names", "transport_name", "is_dotted_path", "transport_path",
           "resolve_section", "transport_params", "bucket_bytes", "fits_transport", "section_rules",
           "check_transport", "transports_help", "describe", "old_keys_in", "refusal", "migrate"]
