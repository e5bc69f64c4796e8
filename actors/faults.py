"""Fault injection for the end-to-end tests: a real process death at a chosen point, once.

`GENSELECT_FAULT="<point>:<count>:<marker>"` makes the process calling `maybe_crash(point)` exit hard
(`os._exit`, no cleanup, like a segfault or an OOM kill) on its `count`-th call at that point, unless the
file `marker` already exists; the marker is created first, so a restarted actor does not crash again.
With `kill_group=True` it SIGKILLs its whole process group instead (the driver's checkpoint point: as a
user's `kill -9` of the driver's process tree would, at a deterministic moment).
Unset (always, outside tests), this costs one dictionary lookup.
"""
import os
import signal

_calls: dict = {}


def maybe_crash(point: str, kill_group: bool = False) -> None:
    spec = os.environ.get("GENSELECT_FAULT")
    if not spec:
        return
    name, count, marker = spec.split(":", 2)
    if name != point:
        return
    _calls[point] = _calls.get(point, 0) + 1
    if _calls[point] != int(count) or os.path.exists(marker):
        return
    with open(marker, "w") as f:
        f.write(f"{point} crashed on call {count} in pid {os.getpid()}\n")
    if kill_group:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os._exit(17)
