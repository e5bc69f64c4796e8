"""Docker backend, for clusters: a fresh container per run, driven through the ``docker`` Python SDK.

Each container: ``--network none``, ``--read-only`` root, a size-capped tmpfs ``/tmp`` as work dir, memory =
memory + swap cap (OOM kill reported), ``--pids-limit``, CPU quota, ``--cap-drop ALL``, ``no-new-privileges``,
user 65534:65534, no log driver (output is streamed over the attach socket and capped here, never stored by
the engine). The spec goes in over stdin; nothing of the host is mounted. On timeout or output flood the
container is killed. Every container is force-removed after its run (in the background, once the result is
known); a janitor removes the pool's containers (found by label) if the supervisor itself is killed, and
containers of dead supervisors are swept at start. Warm, reused containers are not used: a ``docker exec``
leaves timed-out processes behind until the container goes, and reuse would share /tmp between candidates.
"""

from __future__ import annotations

import os
import secrets
import select
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sandbox import janitor
from sandbox.backends.base import Backend, SandboxUnavailable
from sandbox.protocol import FrameDemux, RawRun, Tail, harness_source, python_flags

LABEL = "genselect.sandbox.pool"


def _pool_label() -> str:
    """``host:pid-namespace:pid:random``: identifies a pool's containers, and whether their owner is dead."""
    ns = os.stat("/proc/self/ns/pid").st_ino if os.path.exists("/proc/self/ns/pid") else 0
    return f"{socket.gethostname()}:{ns}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass(eq=False)
class _Launch:
    """A started container whose harness waits for its spec, and the attach socket to it."""

    cid: str
    sock: object
    raw: socket.socket

    def close(self) -> None:
        """Close the attach connection for good (shutdown first: the socket object has other references)."""
        try:
            self.raw.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.raw.close()


class DockerBackend(Backend):
    """See the module docstring."""

    name = "docker"
    rlimit_nproc = False  # no per-run user namespace: RLIMIT_NPROC would count all containers' uid 65534

    def _start(self) -> None:
        cfg = self.cfg
        try:
            import docker
        except ImportError:
            raise SandboxUnavailable("docker backend: the `docker` Python SDK is not installed "
                                     "(pip install docker==7.1.0)") from None
        self._errors = docker.errors
        try:
            timeout = int(cfg.timeout_s) + 30  # bounds every engine call, so a worker is never stuck for long
            self.client = (docker.DockerClient(base_url=cfg.docker_base_url, timeout=timeout) if cfg.docker_base_url
                           else docker.from_env(timeout=timeout))
            self.client.ping()
        except Exception as exc:
            raise SandboxUnavailable(f"docker backend: no Docker engine answers "
                                     f"({cfg.docker_base_url or os.environ.get('DOCKER_HOST', 'local socket')}): "
                                     f"{exc}. Start dockerd (see docs/sandbox.md).") from None
        try:
            self.client.images.get(cfg.docker_image)
        except docker.errors.ImageNotFound:
            raise SandboxUnavailable(f"docker backend: image {cfg.docker_image!r} is missing; build it with "
                                     "`sh sandbox/docker/build_image.sh` (no registry needed)") from None
        self.api = self.client.api
        self._removals = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-docker-rm")
        self._sweep_stale()
        self.label = _pool_label()
        self.cgroup_note = "docker: per-container memory, swap, pids and CPU limits"
        self.janitor = janitor.start([], f"{LABEL}={self.label}", cfg.docker_base_url)
        self.host_config = self.api.create_host_config(
            network_mode="none", read_only=True, mem_limit=cfg.memory_mb * 1024 * 1024,
            memswap_limit=cfg.memory_mb * 1024 * 1024, pids_limit=cfg.max_processes,
            nano_cpus=int(cfg.docker_cpus * 1e9), cap_drop=["ALL"], security_opt=["no-new-privileges"],
            tmpfs={"/tmp": f"size={cfg.tmpfs_mb}m,mode=1777,nosuid,nodev"}, log_config={"type": "none", "config": {}},
            init=True, binds={p: {"bind": p, "mode": "ro"} for p in cfg.extra_ro_binds})

    def _sweep_stale(self) -> None:
        """Remove containers left by dead supervisors of this host and pid namespace (janitor also gone)."""
        host, ns = _pool_label().split(":")[:2]
        for c in self.api.containers(all=True, filters={"label": LABEL}):
            parts = c.get("Labels", {}).get(LABEL, "").split(":")
            if len(parts) == 4 and parts[:2] == [host, ns] and not os.path.exists(f"/proc/{parts[2]}"):
                self._remove(c["Id"])

    def _launch(self) -> _Launch:
        cfg = self.cfg
        python = cfg.python or "/usr/bin/python3"
        cid = self.api.create_container(
            cfg.docker_image, [python, *python_flags(cfg), "-c", harness_source()],
            user=f"{cfg.sandbox_uid}:{cfg.sandbox_gid}", stdin_open=True, working_dir="/tmp", network_disabled=True,
            host_config=self.host_config, labels={LABEL: self.label},
            environment={"HOME": "/tmp", "LANG": "C.UTF-8"})["Id"]
        try:
            sock = self.api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            self.api.start(cid)
        except BaseException:
            self._remove(cid)
            raise
        return _Launch(cid, sock, getattr(sock, "_sock", sock))

    def _alive(self, launch: _Launch) -> bool:
        return not select.select([launch.raw], [], [], 0)[0]  # no output and no EOF yet: still waiting

    def _discard(self, launch: _Launch) -> None:
        launch.close()
        self._remove(launch.cid)

    def _remove(self, cid: str) -> None:
        try:
            self.api.remove_container(cid, force=True)
        except self._errors.NotFound:
            pass

    def _run(self, spec: bytes, nonce: str) -> RawRun:
        launch = self._take_launch()
        try:
            return self._drive(launch, spec, nonce)
        finally:
            launch.close()
            self._removals.submit(self._remove, launch.cid)  # off the caller's path; close() waits for it

    def _drive(self, launch: _Launch, spec: bytes, nonce: str) -> RawRun:
        cfg, raw = self.cfg, launch.raw
        stdout, stderr = Tail(cfg.tail_bytes), Tail(cfg.tail_bytes)
        demux = FrameDemux(nonce, stdout)
        start = time.monotonic()
        deadline, buf = start + cfg.timeout_s, bytearray()
        timed_out = exceeded = False
        try:
            raw.settimeout(cfg.timeout_s)
            raw.sendall(spec)
            raw.shutdown(socket.SHUT_WR)
            raw.setblocking(False)
            while True:
                now = time.monotonic()
                if now >= deadline:
                    timed_out = True
                    break
                if not select.select([raw], [], [], min(deadline - now, 1.0))[0]:
                    continue
                try:
                    data = raw.recv(65536)
                except BlockingIOError:
                    continue
                if not data:
                    break
                buf += data
                _demux_frames(buf, demux.feed, stderr.feed)
                if stdout.total + stderr.total > cfg.max_output_bytes:
                    exceeded = True
                    break
        finally:
            launch.close()  # first: the engine blocks a kill while it cannot deliver the container's output
            demux.close()
            if timed_out or exceeded:
                try:
                    self.api.kill(launch.cid)
                except self._errors.APIError:
                    pass
        code = self.api.wait(launch.cid, timeout=30).get("StatusCode")
        oom = code == 137 and bool(self.api.inspect_container(launch.cid)["State"].get("OOMKilled"))
        sig = 9 if timed_out or exceeded or (code == 137 and oom) else None
        return RawRun(frames=demux.frames, stdout=stdout, stderr=stderr, exit_code=None if sig else code, signal=sig,
                      timed_out=timed_out, output_exceeded=exceeded, oom=oom, duration_s=time.monotonic() - start,
                      cgroup_limits=True)

    def describe(self) -> dict:
        info = {**super().describe(), "image": self.cfg.docker_image}
        if getattr(self, "client", None) is not None:
            info["engine"] = self.client.version().get("Version")
        return info

    def close(self) -> None:
        if getattr(self, "api", None) is not None:
            self._close_prestarted()
            self._removals.shutdown(wait=True)
        if getattr(self, "janitor", None) is not None:
            janitor.stop(self.janitor)
            self.janitor = None
        if getattr(self, "client", None) is not None:
            self.client.close()
            self.client = None


def _demux_frames(buf: bytearray, out, err) -> None:
    """Consume complete multiplexed-stream frames (8-byte header: stream, 0, 0, 0, big-endian length) from
    ``buf``, feeding stdout (1) and stderr (2) payloads to ``out`` / ``err``."""
    while len(buf) >= 8:
        stream, length = buf[0], struct.unpack(">I", bytes(buf[4:8]))[0]
        if len(buf) < 8 + length:
            return
        payload = bytes(buf[8: 8 + length])
        del buf[: 8 + length]
        (err if stream == 2 else out)(payload)
