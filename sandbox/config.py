"""Configuration of the sandbox and the unit of work it runs.

:class:`SandboxConfig` is one flat dataclass: a docstring per field says what it limits and why its default is
what it is. :class:`CodeTask` is one solution plus its tests.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

BACKENDS = ("bubblewrap", "docker", "unsafe_subprocess")
FORMATS = ("assert", "stdio")


def default_python() -> str:
    """The interpreter that runs inside a bubblewrap sandbox: the system ``/usr/bin/python3`` when present
    (it needs nothing from the repository's virtualenv), else the first ``python3`` on PATH."""
    if os.path.exists("/usr/bin/python3"):
        return "/usr/bin/python3"
    return shutil.which("python3") or "python3"


@dataclass
class SandboxConfig:
    """How code is isolated and how much it may use. Units are in the names.

    Attributes:
        backend: ``"bubblewrap"`` (embedded default, Linux without Docker), ``"docker"`` (clusters), or
            ``"unsafe_subprocess"`` (NO isolation: a bare subprocess with rlimits, for the benchmark baseline and
            trusted code only; it logs a warning). There is never a silent fallback from one to another: the
            pool's start-up check raises :class:`~sandbox.backends.base.SandboxUnavailable` instead.
        timeout_s: wall deadline of one run, from start to kill of the whole process tree. Keep it well below
            the training step's deadline.
        case_timeout_s: deadline of one test case inside the run (SIGALRM for assert tests, a killed child
            for stdin/stdout cases), so that one hanging case does not cost the others their credit. ``None``
            means the wall deadline only.
        cpu_time_s: RLIMIT_CPU of every process in the run (CPU seconds; ``None``: unlimited).
        memory_mb: memory cap of the whole run: the per-run cgroup's limit (RAM + swap) where cgroups are
            writable, else RLIMIT_AS per process (then a process tree can use up to ``max_processes`` times it).
            RLIMIT_AS is set to this value too, so that most overruns surface as ``MemoryError`` per test.
        max_processes: tasks (processes + threads) allowed in one run: the cgroup's ``pids.max``, and
            RLIMIT_NPROC inside the sandbox's own user namespace (counted per run there, not per host uid).
        max_output_bytes: stdout + stderr bytes after which the run is killed and reported ``output_limit``.
        tail_bytes: how much of the end of stdout and of stderr the result keeps.
        tmpfs_mb: size of the private, writable work dir (``/tmp`` inside the sandbox, counted in its memory).
        max_file_mb: RLIMIT_FSIZE: the largest file a run may write.
        workers: parallel runs in the pool.
        prestart: each pool worker boots its next sandbox (namespaces, cgroup, interpreter; Docker: the
            container) while idle, so that a task only waits for its own work. Every sandbox still serves exactly
            one run. Costs one idle sandbox per worker.
        queue_size: runs waiting beyond the busy workers; ``submit`` blocks when the queue is full.
        python: interpreter inside the sandbox; ``None``: :func:`default_python` (bubblewrap and the unsafe
            baseline) or ``/usr/bin/python3`` (Docker image).
        site_packages: run the sandboxed interpreter with ``site`` (system-wide packages importable; the
            ``.pth`` files of the host's dist-packages run at every start). Off: ``python3 -I -S``, stdlib only,
            5-10 ms faster per run.
        sandbox_uid / sandbox_gid: the unprivileged host ids a root supervisor drops to before starting
            bubblewrap (the candidate then has no more rights on the host than ``nobody``).
        use_cgroups: ``"auto"`` (per-run cgroups when writable, rlimits otherwise: the result's
            ``cgroup_limits`` says which), ``"require"`` (the start-up check fails without them), ``"off"``.
        extra_ro_binds: host paths made visible, read-only, at the same path inside the sandbox (a dataset, a
            virtualenv). Bubblewrap: ``--ro-bind``; Docker: read-only bind mounts (paths on the engine's host).
        docker_image: image for the Docker backend; build it with ``sandbox/docker/build_image.sh``.
        docker_cpus: CPUs one container may use (Docker ``nano_cpus``).
        docker_base_url: engine address; ``None``: the environment's (``DOCKER_HOST``, else the local socket).
    """

    backend: str = "bubblewrap"
    timeout_s: float = 10.0
    case_timeout_s: float | None = 3.0
    cpu_time_s: int | None = 10
    memory_mb: int = 512
    max_processes: int = 64
    max_output_bytes: int = 4 * 1024 * 1024
    tail_bytes: int = 2048
    tmpfs_mb: int = 64
    max_file_mb: int = 32
    workers: int = 2
    prestart: bool = True
    queue_size: int = 64
    python: str | None = None
    site_packages: bool = False
    sandbox_uid: int = 65534
    sandbox_gid: int = 65534
    use_cgroups: str = "auto"
    extra_ro_binds: tuple[str, ...] = ()
    docker_image: str = "genselect-sandbox:bookworm"
    docker_cpus: float = 1.0
    docker_base_url: str | None = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.use_cgroups not in ("auto", "require", "off"):
            raise ValueError(f"use_cgroups must be auto, require or off, got {self.use_cgroups!r}")
        if self.timeout_s <= 0 or self.memory_mb <= 0 or self.max_processes <= 0 or self.workers <= 0:
            raise ValueError("timeout_s, memory_mb, max_processes and workers must be positive")


@dataclass
class CodeTask:
    """One solution and the tests it is judged by.

    Attributes:
        solution: Python source of the candidate.
        tests: ``format="assert"``: Python source that defines ``check(candidate)`` (HumanEval style); each
            top-level statement of ``check`` that contains an ``assert`` is one test case. ``format="stdio"``:
            a JSON list of ``{"input": str, "output": str}`` cases; the solution runs once per case as a
            program, and its stdout must equal ``output`` up to trailing whitespace on each line and trailing
            blank lines.
        format: ``"assert"`` or ``"stdio"``.
        entry_point: name of the function under test (``"assert"`` only); ``check`` is called with it.
        task_id: free-form label carried through for the caller's bookkeeping.
    """

    solution: str
    tests: str
    format: str = "assert"
    entry_point: str | None = None
    task_id: str | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {self.format!r}")
        if self.format == "assert" and not self.entry_point:
            raise ValueError("format='assert' needs entry_point (the function passed to check)")
