"""Fault injection for the tests: a real process death, or a stall, at a chosen point, once.

`GENSELECT_FAULT="<point>:<count>:<marker>"` makes the process reaching that point for the `count`-th time act,
unless the file `marker` already exists; the marker is created first, so a restarted actor does not act again.
The action is `GENSELECT_FAULT_ACTION`:
- `exit` (the default): `maybe_crash(point)` exits hard (`os._exit`, no cleanup, like a segfault or an OOM kill);
  with `kill_group=True` it SIGKILLs its whole process group instead (the driver's checkpoint point: as a user's
  `kill -9` of the driver's process tree would, at a deterministic moment).
- `hang:<seconds>`: `await maybe_stall(point)` sleeps that long (a request that does not finish, a transfer that
  stalls: the weight-sync deadline tests, docs/rollout.md#timeouts). Cancelling the sleep cancels the stall.
Unset (always, outside tests), each costs one dictionary lookup.
"""
import asyncio
import os
import signal

_calls: dict = {}


def _fires(point: str, action_prefix: str) -> bool:
    spec = os.environ.get("GENSELECT_FAULT")
    if not spec:
        return False
    if not os.environ.get("GENSELECT_FAULT_ACTION", "exit").startswith(action_prefix):
        return False
    name, count, marker = spec.split(":", 2)
    if name != point:
        return False
    _calls[point] = _calls.get(point, 0) + 1
    if _calls[point] != int(count) or os.path.exists(marker):
        return False
    with open(marker, "w") as f:
        f.write(f"{point} fired on call {count} in pid {os.getpid()}\n")
    return True


def maybe_crash(point: str, kill_group: bool = False) -> None:
    if not _fires(point, "exit"):
        return
    if kill_group:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os._exit(17)


async def maybe_stall(point: str) -> None:
    if _fires(point, "hang:"):
        await asyncio.sleep(float(os.environ["GENSELECT_FAULT_ACTION"].split(":", 1)[1]))
