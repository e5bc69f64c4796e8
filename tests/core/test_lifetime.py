"""core/lifetime.py with real processes: a guarded program's processes, an orphan among them, all die with it,
whichever of the guard and its child is killed, and the guard exits with the child's status."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from core.env import ROOT

PROGRAM = textwrap.dedent("""
    import os, subprocess, sys, time
    from core.lifetime import guarded

    if __name__ == "__main__":
        status = guarded("guarded_tree", sys.argv[1:])
        if status is not None:
            sys.exit(status)
        sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
        child = subprocess.Popen(sleeper)
        # an orphan: its parent exits at once; it is re-parented to this process (a subreaper), not to init
        starter = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; "
                                    f"print(subprocess.Popen({sleeper!r}).pid, flush=True)"], stdout=subprocess.PIPE)
        orphan = int(starter.stdout.readline())
        starter.wait()
        print("PIDS", os.getpid(), child.pid, orphan, flush=True)
        time.sleep(600)
""")


@pytest.fixture
def guarded_tree(tmp_path):
    """(guard Popen, [server pid, child pid, orphan pid]) of PROGRAM started under its guard."""
    (tmp_path / "guarded_tree.py").write_text(PROGRAM)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    guard = subprocess.Popen([sys.executable, "-m", "guarded_tree"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    line = guard.stdout.readline()
    assert line.startswith("PIDS"), line + guard.stderr.read()
    pids = [int(p) for p in line.split()[1:]]
    yield guard, pids
    for pid in [guard.pid, *pids]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    guard.wait(10)


def _gone_within(pids: list, seconds: float) -> list:
    """The pids still running (not zombies) after waiting up to `seconds` for them to end."""
    deadline = time.monotonic() + seconds
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def test_the_tree_is_one_guard_one_server_and_the_orphan_stays_below_the_server(guarded_tree):
    guard, (server, child, orphan) = guarded_tree
    assert psutil.Process(server).ppid() == guard.pid and psutil.Process(child).ppid() == server
    assert psutil.Process(orphan).ppid() == server  # the server is a subreaper: its orphans stay in its tree
    assert "GENSELECT_GUARD_PID" not in psutil.Process(child).environ()  # the server's helpers do not inherit it


@pytest.mark.parametrize("target, sig, guard_status", [("guard", signal.SIGKILL, -9),
                                                       ("server", signal.SIGKILL, 128 + 9),
                                                       ("guard", signal.SIGTERM, 128 + 15)])
def test_every_process_dies_whichever_is_killed(guarded_tree, target, sig, guard_status):
    """SIGKILL of the guard: the server notices (parent watch) and kills its tree; SIGKILL of the server: the
    guard kills what it left and exits 137; SIGTERM to the guard reaches the server (which here has no
    handler, so it dies of it) and the guard exits 143."""
    guard, (server, child, orphan) = guarded_tree
    started = time.monotonic()
    os.kill(guard.pid if target == "guard" else server, sig)
    alive = _gone_within([server, child, orphan], 10)
    assert not alive, f"outlived the {target}'s {signal.Signals(sig).name}: {alive}"
    assert guard.wait(10) == guard_status
    if target == "server":
        assert "killed by signal 9; the 2 processes it left were stopped" in guard.stderr.read()
    print(f"\n{signal.Signals(sig).name} of the {target}: its 3 processes gone in {time.monotonic() - started:.1f} s")
