"""Ports for rendezvous: outside the kernel's ephemeral range (where outgoing connections take ports)."""
import random
import socket

from core import net


def test_rendezvous_port_is_outside_the_ephemeral_range_and_ray_ports(tmp_path):
    low, high = net.ephemeral_range()
    for _ in range(20):
        port = net.rendezvous_port("127.0.0.1")
        assert not low <= port <= high
        assert port >= net.RENDEZVOUS_LOW  # above Ray's worker ports (10002-19999)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free right after it was picked


def test_free_port_lies_in_the_ephemeral_range_which_is_why_rendezvous_avoids_it():
    low, high = net.ephemeral_range()
    assert low <= net.free_port() <= high


def test_a_taken_port_is_skipped(tmp_path):
    rng_seed = 7
    first = net.rendezvous_port("127.0.0.1", rng=random.Random(rng_seed))
    with socket.socket() as held:
        held.bind(("127.0.0.1", first))
        held.listen()
        again = net.rendezvous_port("127.0.0.1", rng=random.Random(rng_seed))  # same first pick: taken
        assert again != first


def test_ranges_read_from_the_kernel_file(tmp_path):
    wide = tmp_path / "range"
    wide.write_text("20500\t65000\n")  # nothing below the range: the span above it is used
    assert net.ephemeral_range(str(wide)) == (20500, 65000)
    port = net.rendezvous_port("127.0.0.1", path=str(wide))
    assert 65000 < port <= 65535
    assert net.ephemeral_range(str(tmp_path / "missing")) == (32768, 60999)
    (tmp_path / "bad").write_text("x")
    assert net.ephemeral_range(str(tmp_path / "bad")) == (32768, 60999)
