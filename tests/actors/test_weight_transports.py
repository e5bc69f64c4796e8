"""The weight-transport registry (core/weight_transports.py) and the transports it names (actors/weight_sync/) agree:
every name resolves to a Transport whose parts fit the contract (actors/weight_sync/transport.py), and the names and
their parameters are what the config section `weight_sync.transport: {name, ...params}` accepts and `--help` prints;
a class of one's own gets the section's other keys; the old flat keys are refused, and read back moved."""
from __future__ import annotations

import inspect

import pytest

from actors.weight_sync.transport import Transport, transport_class
from core.weight_transports import TRANSPORTS, transport_names, transports_help


@pytest.mark.parametrize("name", transport_names())
def test_every_registered_name_resolves_to_a_transport_of_that_name(name):
    cls = transport_class(name)
    assert issubclass(cls, Transport) and cls.name == name
    assert cls.deliver is not Transport.deliver, "a transport implements its coordinator part"
    assert cls.receiver is not None and list(inspect.signature(cls.receiver).parameters) == ["update"]
    assert cls.sender is None or list(inspect.signature(cls.sender).parameters) == ["learner"]


def test_the_config_check_and_help_take_the_registrys_names_and_parameters():
    from core.config import ConfigError, describe, load_config

    assert transport_names() == ("object_store", "gloo", "nccl", "ipc")
    rows = {key: (default, text) for key, default, text in describe()}
    assert rows["weight_sync.transport"][1].endswith(transports_help() + " The section's other keys are the "
                                                     "transport's params (object_store and ipc: bucket_mb), checked "
                                                     "before any actor starts (core/weight_transports.py, "
                                                     "docs/rollout.md).")
    assert all(f"'{n}'" in rows["weight_sync.transport"][1] for n in TRANSPORTS)
    assert all(f"weight_sync.transport.name={n}" in rows for n in TRANSPORTS)  # a row per transport
    assert rows["weight_sync.transport.bucket_mb"][0] == 256  # its parameter, with its default
    with pytest.raises(ConfigError, match=r"weight_sync\.transport\.name='mpi' must be one of"):
        load_config("smoke", ["weight_sync.transport.name=mpi"])
    with pytest.raises(ValueError, match="'mpi'"):
        transport_class("mpi")


def test_a_built_in_transport_takes_its_parameters_with_their_defaults():
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from core.config import ConfigError, load_config

    cfg = load_config("smoke")
    assert cfg.weight_sync.transport == {"name": "object_store", "bucket_mb": 256}  # the default, filled in
    ipc = load_config("smoke", ["weight_sync.transport.name=ipc", "weight_sync.transport.bucket_mb=64",
                                "cluster.placement_strategy=STRICT_PACK"])
    assert ipc.weight_sync.transport == {"name": "ipc", "bucket_mb": 64}
    assert WeightSyncBroadcaster(ipc.weight_sync, None, []).transport.params == {"bucket_mb": 64}
    assert load_config("smoke", ["weight_sync.transport.name=gloo"]).weight_sync.transport == {"name": "gloo"}
    with pytest.raises(ConfigError, match=r"weight_sync\.transport\.bucket_mb=64 is a parameter, but "
                                          r"weight_sync\.transport\.name='gloo' takes none"):
        load_config("smoke", ["weight_sync.transport.name=gloo", "weight_sync.transport.bucket_mb=64"])
    with pytest.raises(ConfigError, match=r"weight_sync\.transport\.bucket_mb='big' must be int"):
        load_config("smoke", ["weight_sync.transport.bucket_mb=big"])
    with pytest.raises(ConfigError, match=r"weight_sync\.transport\.buckets=.* takes bucket_mb"):
        load_config("smoke", ["weight_sync.transport.buckets=2"])


def test_a_transport_of_ones_own_is_named_by_its_dotted_path_and_checked_before_anything_starts():
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from core.config import ConfigError, load_config

    path = "tests.actors.helpers_transport:ArraysTransport"
    cfg = load_config("smoke", [f"weight_sync.transport.name={path}", "weight_sync.transport.note=hello"])
    assert cfg.weight_sync.transport == {"name": path, "note": "hello"}  # no object-store bucket_mb carried over
    assert WeightSyncBroadcaster(cfg.weight_sync, None, []).transport.note == "hello"  # its keyword argument
    assert transport_class(path).name == "arrays"
    for overrides, message in (
            (["weight_sync.transport.name=tests.actors.helpers_transport:Missing"], "no attribute 'Missing'"),
            (["weight_sync.transport.name=tests.actors.helpers_transport:NOT_A_TRANSPORT"], "not a transport class"),
            (["weight_sync.transport.name=no_such_package.transports:Mine"], "does not import"),
            ([f"weight_sync.transport.name={path}", "weight_sync.transport.rails=4"],
             r"cannot be called as fn\(cfg, rails=\.\.\.\)")):
        with pytest.raises(ConfigError, match=r"weight_sync\.transport\.name=.*" + message):
            load_config("smoke", overrides)


@pytest.mark.parametrize("override, message", [
    ("weight_sync.backend=ipc", "weight_sync.backend=ipc: weight_sync.backend moved to weight_sync.transport.name; "
                                "set weight_sync.transport.name=ipc"),
    ("weight_sync.bucket_mb=64", "weight_sync.bucket_mb moved to weight_sync.transport.bucket_mb (a parameter of "
                                 "the transports that send in buckets: object_store, ipc)"),
])
def test_the_old_keys_are_refused_naming_the_new_one(override, message, tmp_path):
    from core.config import ConfigError, load_config

    with pytest.raises(ConfigError) as err:
        load_config("smoke", [override])
    assert str(err.value) == f"override {override!r}: {message}"
    key, value = override.split("=")
    layer = tmp_path / "old.yaml"
    layer.write_text(f"base: smoke\nweight_sync:\n  {key.split('.')[1]}: {value}\n")
    with pytest.raises(ConfigError, match="^config .*old.yaml'?: " + message.replace("(", r"\(").replace(")", r"\)")):
        load_config(str(layer))


def test_a_run_config_written_with_the_old_keys_is_read_with_them_moved():
    from core.config import from_yaml, load_config, to_yaml

    written = to_yaml(load_config("smoke", ["weight_sync.transport.name=ipc", "weight_sync.transport.bucket_mb=64",
                                            "cluster.placement_strategy=STRICT_PACK"]))
    old = written.replace("  transport:\n    name: ipc\n    bucket_mb: 64\n", "  backend: ipc\n  bucket_mb: 64\n")
    assert old != written
    assert from_yaml(old).weight_sync.transport == {"name": "ipc", "bucket_mb": 64}
    nccl = old.replace("backend: ipc", "backend: gloo")  # a broadcast never read bucket_mb: it goes
    assert from_yaml(nccl).weight_sync.transport == {"name": "gloo"}
    default = old.replace("  backend: ipc\n", "")  # no backend: the object store, the default
    assert from_yaml(default).weight_sync.transport == {"name": "object_store", "bucket_mb": 64}


def test_a_layer_naming_another_transport_starts_the_section_afresh(tmp_path):
    from core.config import load_config

    ipc = ["weight_sync.transport.name=ipc", "weight_sync.transport.bucket_mb=64",
           "cluster.placement_strategy=STRICT_PACK"]
    assert load_config("smoke", ipc + ["weight_sync.transport.name=gloo"]).weight_sync.transport == {"name": "gloo"}
    layer = tmp_path / "gloo.yaml"
    layer.write_text("base: paper_math_1node\nweight_sync:\n  transport:\n    name: gloo\n")
    assert load_config(str(layer)).weight_sync.transport == {"name": "gloo"}
