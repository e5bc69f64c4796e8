"""The learner ranks' process group: the rendezvous every rank joins before DeepSpeed starts
(actors/learner/learner.py)."""
from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def join_process_group(init, rank: int, world_size: int, master_addr: str, master_port: int,
                       attempts: int = 3) -> None:
    """Set the rendezvous variables and call `init()` (deepspeed.init_distributed with this rank's arguments).

    A single rank has no peer to agree on a port with, so it picks one itself, here, on every interface, and
    picks again if the pick was taken before its store could listen (EADDRINUSE). Several ranks use the
    driver's `master_addr:master_port`, which all of them were given; the driver takes it from
    `core.net.rendezvous_port`, outside the ports that outgoing connections are given (a port from the kernel's
    ephemeral range, chosen by the driver seconds earlier, was once taken in CI)."""
    from core.net import rendezvous_port

    for attempt in range(1, attempts + 1):
        addr, port = (master_addr, master_port) if world_size > 1 else ("127.0.0.1", rendezvous_port(""))
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK="0",
                          LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR=addr, MASTER_PORT=str(port))
        try:
            init()
            return
        except RuntimeError as err:
            taken = "EADDRINUSE" in str(err) or "address already in use" in str(err).lower()
            if world_size > 1 or not taken or attempt == attempts:
                raise
            log.warning("learner rank 0: port %d was taken before the process group could listen on it (%s); "
                        "picking another", port, str(err).splitlines()[0][:200])
