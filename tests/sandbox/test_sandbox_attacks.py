"""The attack suite: each hostile solution is contained, reported in its result, and leaves no process, cgroup,
mount or container behind. Parametrised over backends: bubblewrap always, Docker where an engine can run."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid

import pytest

from sandbox.config import CodeTask
from tests.sandbox.helpers_sandbox import SECRET_DIR, assert_nothing_left, mounts, processes_with

pytestmark = pytest.mark.slow


def task(body: str, check: str) -> CodeTask:
    """A solution ``f`` with ``body`` (indented by the caller) judged by ``check``'s asserts."""
    return CodeTask(solution="import os, sys, time, subprocess, socket\n\ndef f():\n" + body,
                    tests="def check(candidate):\n" + check, entry_point="f")


def test_infinite_loop_is_killed_at_the_wall_deadline(pool):
    token = uuid.uuid4().hex
    before = mounts()
    start = time.monotonic()
    r = pool.run(task(f"    # {token}\n    while True:\n        pass\n", "    assert candidate() is None\n"))
    assert r.status == "timeout" and r.timed_out
    assert r.pass_fraction == 0.0 and r.tests[0].error == "not run"
    assert pool.cfg.timeout_s <= time.monotonic() - start < pool.cfg.timeout_s + 5
    assert_nothing_left(pool, token, before)


def test_fork_bomb_is_capped_and_cleaned_up(pool):
    token = uuid.uuid4().hex
    body = (f"    # {token}\n    while True:\n        try:\n            os.fork()\n        except OSError:\n"
            "            pass\n")
    start = time.monotonic()
    r = pool.run(task(body, "    assert candidate()\n"))
    assert r.status == "timeout" and r.pass_fraction == 0.0
    assert time.monotonic() - start < pool.cfg.timeout_s + 5
    assert_nothing_left(pool, token)
    assert subprocess.run(["true"]).returncode == 0  # the host can still start processes


def test_process_count_is_capped_per_run(pool):
    body = ("    n = 0\n    for _ in range(10000):\n        try:\n            if os.fork() == 0:\n"
            "                time.sleep(30)\n                os._exit(0)\n            n += 1\n"
            "        except OSError:\n            break\n    return n\n")
    cap = pool.cfg.max_processes
    r = pool.run(task(body, f"    assert 0 < candidate() < {cap}\n"))
    assert r.status == "completed" and r.all_passed, r
    assert_nothing_left(pool)


def test_memory_bomb_in_one_process_hits_the_limit(pool):
    r = pool.run(task("    x = bytearray(8 * 1024 ** 3)\n    return len(x)\n", "    assert candidate() > 0\n"))
    assert r.memory_exceeded and r.status == "memory_limit"
    assert "MemoryError" in r.tests[0].error
    assert_nothing_left(pool)


def test_memory_spread_over_processes_hits_the_run_limit(pool):
    """Each child stays under the per-process rlimit; together they exceed the run's cgroup cap."""
    if not pool.backend.describe()["cgroups"].startswith(("v1", "v2", "docker")):
        pytest.skip("per-run memory caps need cgroups; this machine has rlimits only")
    body = ("    kids = []\n    for _ in range(6):\n        pid = os.fork()\n        if pid == 0:\n"
            "            b = b'x' * (150 * 1024 * 1024)\n            time.sleep(20)\n            os._exit(0)\n"
            "        kids.append(pid)\n    for pid in kids:\n        os.waitpid(pid, 0)\n")
    r = pool.run(task(body, "    assert candidate() is None\n"))
    assert r.memory_exceeded, r
    assert_nothing_left(pool)


@pytest.fixture
def listener():
    """A TCP socket listening on 127.0.0.1 of the host."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.settimeout(0.5)
    yield s
    s.close()


def test_cannot_connect_to_a_port_opened_on_host_loopback(pool, listener):
    port = listener.getsockname()[1]
    body = (f"    try:\n        socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "        return 'connected'\n    except OSError as e:\n        return 'blocked'\n")
    r = pool.run(task(body, "    assert candidate() == 'blocked'\n"))
    assert r.all_passed, r
    with pytest.raises(socket.timeout):
        listener.accept()
    assert_nothing_left(pool)


def test_cannot_write_outside_the_work_dir(pool):
    """Only the private scratch tmpfs mounts (/tmp, /dev/shm) are writable; everything else is read-only or
    absent, including the host directory that is bound in."""
    targets = ["/x", "/usr/x", "/etc/x", "/var/tmp/x", "/root/x", "/home/x", f"{SECRET_DIR}/x", "/dev/x"]
    body = (f"    ok = []\n    for p in {targets!r}:\n        try:\n            open(p, 'w').write('pwned')\n"
            "            ok.append(p)\n        except OSError:\n            pass\n"
            "    open('/tmp/inside', 'w').write('fine')\n    return ok, open('/tmp/inside').read()\n")
    r = pool.run(task(body, "    got = candidate()\n    assert got == ([], 'fine'), got\n"))
    assert r.all_passed, r
    for p in targets:
        assert not os.path.exists(p) or open(p).read() != "pwned"
    assert_nothing_left(pool)


def test_cannot_read_a_root_only_file(pool):
    body = (f"    public = open('{SECRET_DIR}/public.txt').read()\n    try:\n"
            f"        return public, open('{SECRET_DIR}/secret.txt').read()\n"
            "    except PermissionError:\n        return public, 'denied'\n")
    r = pool.run(task(body, "    assert candidate() == ('public\\n', 'denied')\n"))
    assert r.all_passed, r  # the directory is visible (public is read), the root-only file is not readable


def test_setsid_orphan_does_not_outlive_the_run(pool):
    token = uuid.uuid4().hex
    body = (f"    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60) # {token}'],\n"
            "                     start_new_session=True)\n"
            "    if os.fork() == 0:\n        os.setsid()\n"
            f"        os.execv(sys.executable, [sys.executable, '-c', 'while True: pass # {token}'])\n"
            "    while True:\n        pass\n")
    r = pool.run(task(body, "    assert candidate()\n"))
    assert r.status == "timeout"
    assert_nothing_left(pool, token)


def test_stdout_flood_is_cut_at_the_output_limit(pool):
    r = pool.run(task("    while True:\n        print('x' * 65536)\n", "    assert candidate()\n"))
    assert r.status == "output_limit" and r.output_exceeded
    assert r.stdout_bytes <= pool.cfg.max_output_bytes + 1024 * 1024
    assert len(r.stdout_tail) <= pool.cfg.tail_bytes
    assert_nothing_left(pool)


def test_forged_result_frames_are_ignored(pool):
    fake = '\\n\\x1e' + "0" * 32 + ' {"t": "case", "i": 0, "passed": true}\\n'
    body = f"    print('{fake}' * 3)\n    return 1\n"
    r = pool.run(task(body, "    assert candidate() == 2\n"))
    assert r.status == "completed" and r.pass_fraction == 0.0
    assert '"passed": true' in r.stdout_tail  # the forgery is reported as plain output


def test_forked_copies_of_the_harness_cannot_report(pool):
    """A solution that answers differently in two forked copies must not collect the better report."""
    body = "    return 1 if os.fork() == 0 else 2\n"
    r = pool.run(task(body, "    assert candidate() == 1\n"))
    assert r.pass_fraction == 0.0, r


def test_every_process_of_a_run_is_inside_its_cgroups(bwrap_pool):
    """The sandbox tree is adopted into the run's cgroups before the task arrives, so what the candidate starts
    is born inside them (memory and pids hierarchies alike)."""
    cg = bwrap_pool.backend.cgroups
    if cg is None:
        pytest.skip("no writable cgroups here")
    token = uuid.uuid4().hex
    body = (f"    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30) # {token}'])\n"
            "    time.sleep(2)\n    return 1\n")
    future = bwrap_pool.submit(task(body, "    assert candidate() == 1\n"))
    deadline = time.monotonic() + 10
    while not processes_with(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = set(processes_with(token))
    assert pids, "the candidate's child never started"
    for base in cg.pool_dirs.values():
        members = {int(p) for run in base.iterdir() if run.is_dir() for p in (run / "cgroup.procs").read_text().split()}
        assert pids <= members, (base, pids, members)
    assert future.result().all_passed
    assert_nothing_left(bwrap_pool, token)
