"""Per-run cgroups: a memory cap (RAM + swap) and a process-count cap for each sandboxed run.

Layout: below the supervisor's OWN cgroup in each hierarchy (so limits that a cluster or a CI runner put on
the supervisor still bind its sandboxes) the pool makes ``gsbx-<pidns>-<pid>-<hex>/`` and, per run,
``r<n>/``. cgroup v1 (separate ``memory`` and ``pids`` hierarchies, as on these development machines) and
cgroup v2 (unified; needs the ``memory`` and ``pids`` controllers delegated to the supervisor's cgroup) are
both handled. When neither is writable the pool runs with rlimits only and every result says
``cgroup_limits: false``.

A run's process tree is adopted into its cgroup (:meth:`RunCgroup.adopt`) while the sandbox boots.

Cleanup: a run's cgroup is emptied (SIGKILL to every member) and removed when the run ends; the pool's
directories when the pool closes; if the supervisor is SIGKILLed, the janitor process (:mod:`sandbox.janitor`)
does the same; pool directories whose owner pid is dead are swept at the next pool start.
"""

from __future__ import annotations

import itertools
import os
import re
import secrets
import signal
import time
from pathlib import Path

PREFIX = "gsbx-"
_STALE = re.compile(r"^gsbx-(\d+)-(\d+)-[0-9a-f]+$")  # gsbx-<pid namespace inode>-<pid>-<random>


def _pidns() -> int:
    """Inode of this process's pid namespace: pool dirs of other namespaces are never swept from here."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, options) of every cgroup / cgroup2 mount."""
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                out.append((parts[1], parts[2], set(parts[3].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """Controller (or ``""`` for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                paths[c] = path
    return paths


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _members(procs_files: list[Path]) -> set[int]:
    pids: set[int] = set()
    for p in procs_files:
        try:
            pids.update(int(x) for x in p.read_text().split())
        except OSError:
            pass
    return pids


def kill_and_remove(dirs: list[Path], wait_s: float = 3.0) -> bool:
    """SIGKILL every process in ``dirs`` (and their sub-cgroups), then rmdir them, children first. Returns
    whether every directory is gone."""
    all_dirs = []
    for d in dirs:
        if d.is_dir():
            all_dirs.extend(sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)))
            all_dirs.append(d)
    end = time.monotonic() + wait_s
    while True:
        pids = _members([d / "cgroup.procs" for d in all_dirs])
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not pids:
            for d in all_dirs:
                try:
                    d.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    pass  # EBUSY while members finish exiting: retried below
        if not any(d.exists() for d in all_dirs) or time.monotonic() > end:
            return not any(d.exists() for d in all_dirs)
        time.sleep(0.01)


class RunCgroup:
    """The cgroup(s) of one run; ``procs_files`` are their ``cgroup.procs``."""

    def __init__(self, version: int, dirs: dict[str, Path]) -> None:
        self.version = version
        self.dirs = dirs
        self.procs_files = [d / "cgroup.procs" for d in dirs.values()]

    def adopt(self, pid: int) -> None:
        """Move ``pid`` and then its descendants into this run's cgroups, parents first: a child forked before
        its parent moved is found in the parent's ``children`` list afterwards, one forked after inherits the
        cgroup, so no process of the tree stays outside. Vanished processes are skipped."""
        todo = [pid]
        while todo:
            p = todo.pop()
            try:
                for procs in self.procs_files:
                    _write(procs, str(p))
            except ProcessLookupError:
                continue
            for children in Path(f"/proc/{p}/task").glob("*/children"):
                try:
                    todo.extend(int(c) for c in children.read_text().split())
                except OSError:
                    pass

    def oom_kills(self) -> int:
        """How many times the OOM killer fired inside this run."""
        path = self.dirs["memory"] / ("memory.oom_control" if self.version == 1 else "memory.events")
        try:
            for line in path.read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return 0

    def kill(self) -> None:
        """SIGKILL every member (v2: ``cgroup.kill`` when the kernel has it)."""
        if self.version == 2 and (self.dirs["memory"] / "cgroup.kill").exists():
            try:
                _write(self.dirs["memory"] / "cgroup.kill", "1")
                return
            except OSError:
                pass
        for pid in _members(self.procs_files):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def remove(self) -> bool:
        """Kill what is left and remove the directories; True when they are gone."""
        return kill_and_remove(list(dict.fromkeys(self.dirs.values())))


class CgroupPool:
    """Parent cgroups of one pool. Build with :meth:`create`, which returns ``(pool, None)`` or
    ``(None, reason)``."""

    def __init__(self, version: int, pool_dirs: dict[str, Path]) -> None:
        self.version = version
        self.pool_dirs = pool_dirs
        self._ids = itertools.count(1)  # next() on a count is atomic: runs start from several threads

    @classmethod
    def create(cls) -> tuple["CgroupPool | None", str | None]:
        """Find writable memory + pids controllers, sweep stale pool dirs, make this pool's dirs."""
        try:
            bases, version = _bases()
        except OSError as exc:
            return None, f"cannot read cgroup mounts: {exc}"
        if not bases:
            return None, version_reason(version)
        for base in set(bases.values()):
            sweep_stale(base)
        name = f"{PREFIX}{_pidns()}-{os.getpid()}-{secrets.token_hex(4)}"
        made: dict[str, Path] = {}
        try:
            for ctrl, base in bases.items():
                d = base / name
                d.mkdir(exist_ok=True)
                made[ctrl] = d
            if version == 2:
                _enable_v2(bases["memory"], made["memory"])
        except OSError as exc:
            kill_and_remove(list(dict.fromkeys(made.values())))
            return None, f"cgroup v{version} below {next(iter(bases.values()))} is not writable: {exc}"
        return cls(version, made), None

    def new_run(self, memory_bytes: int, max_pids: int) -> RunCgroup:
        """A fresh run cgroup with its limits set. Raises OSError if the kernel refuses."""
        n = next(self._ids)
        dirs: dict[str, Path] = {}
        try:
            for ctrl, pool_dir in self.pool_dirs.items():
                d = pool_dir / f"r{n}"
                if d not in dirs.values():
                    d.mkdir()
                dirs[ctrl] = d
            run = RunCgroup(self.version, dirs)
            if self.version == 1:
                _write(dirs["memory"] / "memory.limit_in_bytes", str(memory_bytes))
                if (dirs["memory"] / "memory.memsw.limit_in_bytes").exists():
                    _write(dirs["memory"] / "memory.memsw.limit_in_bytes", str(memory_bytes))
                _write(dirs["pids"] / "pids.max", str(max_pids))
            else:
                _write(dirs["memory"] / "memory.max", str(memory_bytes))
                if (dirs["memory"] / "memory.swap.max").exists():
                    _write(dirs["memory"] / "memory.swap.max", "0")
                _write(dirs["pids"] / "pids.max", str(max_pids))
            run.procs_files = list(dict.fromkeys(run.procs_files))
            return run
        except OSError:
            kill_and_remove(list(dict.fromkeys(dirs.values())))
            raise

    def close(self) -> bool:
        """Kill and remove every run cgroup and the pool's own directories."""
        return kill_and_remove(list(dict.fromkeys(self.pool_dirs.values())))


def _bases() -> tuple[dict[str, Path], int]:
    """Controller -> the supervisor's own cgroup dir holding it, for memory and pids; ({}, version) if absent."""
    mounts, own = _mounts(), _own_paths()
    v1 = {c: Path(m) / own[c].lstrip("/") for m, t, opts in mounts if t == "cgroup"
          for c in ("memory", "pids") if c in opts and c in own}
    if len(v1) == 2:
        return v1, 1
    v2 = [Path(m) / own.get("", "/").lstrip("/") for m, t, _ in mounts if t == "cgroup2"]
    for base in v2:
        try:
            ctrls = (base / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        if "memory" in ctrls and "pids" in ctrls:
            return {"memory": base, "pids": base}, 2
    return {}, 2 if v2 else 1


def version_reason(version: int) -> str:
    if version == 2:
        return "cgroup v2 is mounted but the memory and pids controllers are not delegated to this cgroup"
    return "no cgroup v1 memory and pids hierarchies are mounted"


def _enable_v2(base: Path, pool_dir: Path) -> None:
    """Enable memory + pids for the pool's children (and for the pool itself, below the base)."""
    have = (base / "cgroup.subtree_control").read_text().split()
    if not {"memory", "pids"} <= set(have):
        _write(base / "cgroup.subtree_control", "+memory +pids")  # EBUSY when base holds processes
    _write(pool_dir / "cgroup.subtree_control", "+memory +pids")


def sweep_stale(base: Path) -> list[Path]:
    """Remove pool dirs under ``base`` made in this pid namespace by a pid that is no longer alive (a
    supervisor that died without its janitor); returns what was removed."""
    removed = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for d in entries:
        m = _STALE.match(d.name)
        if m and int(m.group(1)) == _pidns() and d.is_dir() and not Path(f"/proc/{m.group(2)}").exists():
            if kill_and_remove([d]):
                removed.append(d)
    return removed
