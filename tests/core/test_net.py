"""core.net.free_port: a free port outside the kernel's ephemeral range (where outgoing connections take their
local ports, so a port picked there can be taken before its listener binds it: EADDRINUSE seen in CI)."""
import socket

from core import net


def test_free_ports_lie_outside_the_ephemeral_range_and_can_be_bound():
    low, high = net.ephemeral_range()
    assert 1024 <= low <= high <= 65535
    for host in ("127.0.0.1", ""):
        for _ in range(20):
            port = net.free_port(host)
            assert not low <= port <= high
            with socket.socket() as s:
                s.bind((host, port))


def test_without_room_outside_the_range_it_falls_back_to_the_kernel(monkeypatch, tmp_path):
    whole = tmp_path / "range"
    whole.write_text("1024\t65535\n")
    monkeypatch.setattr(net, "_RANGE_FILE", whole)
    assert net.ephemeral_range() == (1024, 65535)
    assert 1024 <= net.free_port() <= 65535
    monkeypatch.setattr(net, "_RANGE_FILE", tmp_path / "missing")
    assert net.ephemeral_range() == (32768, 60999)
