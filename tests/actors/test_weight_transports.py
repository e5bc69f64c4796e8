"""The weight-transport registry (core/weight_transports.py) and the transports it names (actors/weight_sync/) agree:
every name resolves to a Transport whose parts fit the contract (actors/weight_sync/transport.py), and the names are
what the config check accepts and `--help` prints."""
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


def test_the_config_check_and_help_take_the_registrys_names():
    from core.config import ConfigError, describe, load_config

    assert transport_names() == ("object_store", "gloo", "nccl", "ipc")
    help_text = dict((key, text) for key, _, text in describe())["weight_sync.backend"]
    assert help_text.endswith(transports_help()) and all(f"'{n}'" in help_text for n in TRANSPORTS)
    with pytest.raises(ConfigError, match="weight_sync.backend"):
        load_config("smoke", ["weight_sync.backend=mpi"])
    with pytest.raises(ValueError, match="'mpi'"):
        transport_class("mpi")


def test_a_transport_of_ones_own_is_named_by_its_dotted_path_and_checked_before_anything_starts():
    from core.config import ConfigError, load_config

    path = "tests.actors.helpers_transport:ArraysTransport"
    assert load_config("smoke", [f"weight_sync.backend={path}"]).weight_sync.backend == path
    assert transport_class(path).name == "arrays"
    with pytest.raises(ConfigError, match=r"weight_sync.backend=.*no attribute 'Missing'"):
        load_config("smoke", ["weight_sync.backend=tests.actors.helpers_transport:Missing"])
    with pytest.raises(ConfigError, match=r"weight_sync.backend=.*not a transport class"):
        load_config("smoke", ["weight_sync.backend=tests.actors.helpers_transport:NOT_A_TRANSPORT"])
    with pytest.raises(ConfigError, match=r"weight_sync.backend=.*does not import"):
        load_config("smoke", ["weight_sync.backend=no_such_package.transports:Mine"])
