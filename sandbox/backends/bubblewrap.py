"""Bubblewrap backend: the embedded default on Linux without Docker.

One run = one ``bwrap`` process tree:

- a root supervisor first drops to an unprivileged host uid/gid (``setpriv``, no supplementary groups, empty
  capability sets). This matters: bubblewrap started by root maps the sandbox's uid to host root, and files
  only root may read would be readable inside. As ``nobody`` they are not;
- every namespace is unshared (user, pid, net, ipc, uts, cgroup, mount), further user namespaces are disabled,
  all capabilities dropped, ``--new-session`` (no terminal injection), ``--die-with-parent``;
- the file system is a read-only view of ``/usr`` (+ the ``/bin``/``/lib`` links and a few ``/etc`` files
  Python needs), fresh ``/proc`` and ``/dev``, and a private size-capped tmpfs ``/tmp`` as work dir. Nothing
  else of the host (``/home``, ``/root``, the repository, ``/var``, ``/sys``) exists inside;
- the network namespace has only a down loopback: nothing can be reached, not even 127.0.0.1 of the host;
- rlimits (CPU, address space, file size, open files, no core) and RLIMIT_NPROC are set by the harness after
  the user namespace exists, so the process count is per run, not per host uid (kernel >= 5.14 counts
  RLIMIT_NPROC per user namespace);
- where cgroups are writable, the sandbox's whole process tree is moved into a per-run cgroup (memory +
  swap cap, pids cap) while it boots, before it receives its task: no candidate code runs outside it.

Timeout or output flood: SIGKILL to the bwrap process group and to every member of the run's cgroup; the pid
namespace dies with its init, which takes every orphan (``setsid`` or not) with it.
"""

from __future__ import annotations

import glob
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from sandbox import janitor
from sandbox.backends.base import Backend, SandboxUnavailable
from sandbox.cgroups import CgroupPool, RunCgroup
from sandbox.config import default_python
from sandbox.process import drain, reap
from sandbox.protocol import FrameDemux, RawRun, Tail, harness_source, python_flags

ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "passwd", "group",
             "mime.types")
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
       "PYTHONHASHSEED": "0"}


def filesystem_args(python: str) -> list[str]:
    """bwrap arguments for the read-only system view plus the interpreter's own prefix if it lies elsewhere."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = "/" + name
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in ETC_FILES + tuple(os.path.basename(p) for p in glob.glob("/etc/python3*")):
        args += ["--ro-bind-try", "/etc/" + name, "/etc/" + name]
    real = os.path.realpath(python)
    prefix = os.path.dirname(os.path.dirname(real))
    if not real.startswith("/usr/") and prefix not in ("/", ""):
        args += ["--ro-bind", prefix, prefix]
    return args


@dataclass(eq=False)
class _Launch:
    """A started sandbox (its harness waits for the spec on stdin) and its run cgroup."""

    proc: subprocess.Popen
    cg: RunCgroup | None

    def kill(self) -> None:
        """SIGKILL the bwrap process group (while it is not reaped) and every member of the run's cgroup."""
        if self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.cg is not None:
            self.cg.kill()


class BubblewrapBackend(Backend):
    """See the module docstring."""

    name = "bubblewrap"

    def _start(self) -> None:
        cfg = self.cfg
        if not sys.platform.startswith("linux"):
            raise SandboxUnavailable("bubblewrap backend needs Linux")
        self.bwrap = shutil.which("bwrap")
        if not self.bwrap:
            raise SandboxUnavailable("bubblewrap backend: `bwrap` is not installed (Debian: apt-get install "
                                     "bubblewrap, or run sandbox/install.sh)")
        self.python = cfg.python or default_python()
        if not os.access(self.python, os.X_OK):
            raise SandboxUnavailable(f"bubblewrap backend: no interpreter at {self.python}")
        self.drop = os.geteuid() == 0
        if self.drop and not shutil.which("setpriv"):
            raise SandboxUnavailable("bubblewrap backend: running as root needs `setpriv` (util-linux) to drop to "
                                     f"uid {cfg.sandbox_uid} before starting bwrap")
        self.cgroups: CgroupPool | None = None
        self.janitor = None
        if cfg.use_cgroups != "off":
            self.cgroups, reason = CgroupPool.create()
            if self.cgroups is None and cfg.use_cgroups == "require":
                raise SandboxUnavailable(f"bubblewrap backend: use_cgroups='require' but {reason}")
            self.cgroup_note = (f"v{self.cgroups.version} per-run memory + pids limits" if self.cgroups
                                else f"unavailable ({reason}): rlimits only")
        else:
            self.cgroup_note = "off by configuration: rlimits only"
        if self.cgroups:
            self.janitor = janitor.start(list(self.cgroups.pool_dirs.values()))
        self._argv = self._bwrap_argv()

    def _bwrap_argv(self) -> list[str]:
        cfg = self.cfg
        argv = [self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                "--new-session", "--cap-drop", "ALL", "--uid", str(cfg.sandbox_uid), "--gid", str(cfg.sandbox_gid),
                "--hostname", "sandbox", "--clearenv"]
        for key, value in ENV.items():
            argv += ["--setenv", key, value]
        argv += filesystem_args(self.python)
        for path in cfg.extra_ro_binds:
            argv += ["--ro-bind", path, path]
        size = str(cfg.tmpfs_mb * 1024 * 1024)
        argv += ["--proc", "/proc", "--dev", "/dev", "--size", size, "--tmpfs", "/tmp", "--size", size,
                 "--tmpfs", "/dev/shm", "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp"]
        return argv + ["--", self.python, *python_flags(cfg), "-c", harness_source()]

    def _launcher(self) -> list[str]:
        """What runs before bwrap: as root, drop to the sandbox uid with no groups and no capabilities."""
        if not self.drop:
            return []
        return ["setpriv", f"--reuid={self.cfg.sandbox_uid}", f"--regid={self.cfg.sandbox_gid}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]

    def _launch(self) -> _Launch:
        cfg = self.cfg
        cg = self.cgroups.new_run(cfg.memory_mb * 1024 * 1024, cfg.max_processes) if self.cgroups else None
        try:
            proc = subprocess.Popen(self._launcher() + self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=ENV, start_new_session=True, close_fds=True)
        except BaseException:
            if cg is not None:
                cg.remove()
            raise
        launch = _Launch(proc, cg)
        if cg is not None:
            try:  # while bwrap boots: no candidate code runs before the spec, which is sent after this
                cg.adopt(proc.pid)
            except BaseException:
                self._discard(launch)
                raise
        return launch

    def _alive(self, launch: _Launch) -> bool:
        ready, _, _ = select.select([launch.proc.stdout, launch.proc.stderr], [], [], 0)
        return launch.proc.poll() is None and not ready  # still booting or waiting, said nothing

    def _discard(self, launch: _Launch) -> None:
        launch.kill()
        reap(launch.proc, launch.kill)
        for stream in (launch.proc.stdin,):
            stream.close()
        if launch.cg is not None:
            launch.cg.remove()

    def _run(self, spec: bytes, nonce: str) -> RawRun:
        launch = self._take_launch()
        try:
            return self._drive(launch, spec, nonce)
        finally:
            if launch.cg is not None:
                launch.cg.remove()

    def _drive(self, launch: _Launch, spec: bytes, nonce: str) -> RawRun:
        cfg, proc, cg = self.cfg, launch.proc, launch.cg
        stdout, stderr = Tail(cfg.tail_bytes), Tail(cfg.tail_bytes)
        demux = FrameDemux(nonce, stdout)
        start = time.monotonic()
        done = drain(proc, spec, demux, stderr, start + cfg.timeout_s, cfg.max_output_bytes, launch.kill)
        exit_code, sig = reap(proc, launch.kill)
        launch.kill()  # anything of the run that is still alive (there should be nothing)
        duration = time.monotonic() - start
        if exit_code is not None and 128 < exit_code <= 128 + 64:  # bwrap reports a signalled child as 128+N
            exit_code, sig = None, exit_code - 128
        error = None
        if done.stdin_broken and not demux.frames:
            error = f"the sandbox exited before reading its task: {stderr.text().strip()[-500:]}"
        return RawRun(frames=demux.frames, stdout=stdout, stderr=stderr, exit_code=exit_code, signal=sig,
                      timed_out=done.timed_out, output_exceeded=done.output_exceeded,
                      oom=bool(cg and cg.oom_kills()), duration_s=duration, cgroup_limits=cg is not None, error=error)

    def describe(self) -> dict:
        return {**super().describe(), "bwrap": getattr(self, "bwrap", None), "python": getattr(self, "python", None),
                "drops_to_uid": self.cfg.sandbox_uid if getattr(self, "drop", False) else os.geteuid()}

    def close(self) -> None:
        self._close_prestarted()
        if getattr(self, "cgroups", None) is not None:
            self.cgroups.close()
            self.cgroups = None
        if getattr(self, "janitor", None) is not None:
            janitor.stop(self.janitor)
            self.janitor = None
