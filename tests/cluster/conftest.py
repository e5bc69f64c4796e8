"""Helpers for the cluster tests: the `ray` CLI with a cluster's token, job submission, the state API, and
simulated multi-node clusters on this machine."""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
RAY = str(Path(sys.executable).with_name("ray"))
CACHE = ROOT / ".cache"
PINS = ["cluster.learner_node_resource=learner_node", "cluster.rollout_node_resource=rollout_node",
        "cluster.verifier_node_resource=verifier_node"]


class RayClient:
    """The `ray` CLI against one cluster's dashboard, with its token-auth environment."""

    def __init__(self, address: str, auth: dict):
        self.address, self.env = address, {**os.environ, **auth}

    def run(self, *args, check=True, timeout=120, env=None):
        k = args.index("--") if "--" in args else len(args)  # the address goes before the entrypoint
        proc = subprocess.run([RAY, *args[:k], "--address", self.address, *args[k:]], capture_output=True, text=True,
                              timeout=timeout, env=env or self.env, cwd=ROOT)
        if check:
            assert proc.returncode == 0, f"ray {' '.join(args)}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        return proc

    def refuses_a_wrong_token(self) -> bool:
        """Whether `ray job list` with a wrong token fails and says why (token authentication is on)."""
        proc = self.run("job", "list", check=False, env={**os.environ, "RAY_AUTH_MODE": "token",
                                                         "RAY_AUTH_TOKEN": "not-the-token"})
        return proc.returncode != 0 and "token" in (proc.stdout + proc.stderr).lower()

    def submit(self, submission_id: str, run_dir: Path, *overrides, working_dir: bool = True) -> None:
        """`ray job submit --no-wait` of the smoke config, with the checkout uploaded as working_dir, or
        (working_dir=False) read in place through PYTHONPATH (every simulated node shares this disk)."""
        env_vars = {"TORCH_EXTENSIONS_DIR": str(CACHE / "torch_extensions")}
        upload = ["--working-dir", str(ROOT)] if working_dir else []
        if not working_dir:
            env_vars["PYTHONPATH"] = str(ROOT)
        args = ["job", "submit", "--no-wait", "--submission-id", submission_id, *upload, "--runtime-env-json",
                json.dumps({"env_vars": env_vars}), "--", sys.executable, "-m", "driver.train", "smoke",
                f"run_dir={run_dir}", f"model.cache_dir={CACHE / 'models'}", f"data.out_dir={CACHE / 'datasets'}",
                *overrides]
        for _ in range(30):  # a fresh head's job server answers before its job agent is up
            proc = self.run(*args, check=False)
            if "No available agent" not in proc.stdout + proc.stderr:
                break
            time.sleep(2)
        assert proc.returncode == 0, f"ray job submit: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"

    def status(self, submission_id: str) -> str:
        proc = self.run("job", "status", submission_id)
        out = proc.stdout + proc.stderr  # the CLI logs the status line to stderr
        for state in ("SUCCEEDED", "FAILED", "STOPPED", "RUNNING", "PENDING"):
            if state.lower() in out.lower():
                return state
        return "UNKNOWN"

    def wait(self, submission_id: str, timeout: float = 900) -> str:
        deadline = time.time() + timeout
        while time.time() < deadline:
            state = self.status(submission_id)
            if state in ("SUCCEEDED", "FAILED", "STOPPED"):
                return state
            time.sleep(3)
        return "TIMEOUT"

    def logs(self, submission_id: str) -> str:
        return self.run("job", "logs", submission_id, check=False).stdout[-6000:]

    def alive_actors(self, alive: bool = True) -> dict:
        """class name -> node id of each alive actor (alive=False: of every actor, on its latest node)."""
        filters = ["--filter", "state=ALIVE"] if alive else []
        out = self.run("list", "actors", *filters, "--format", "json", "--limit", "1000").stdout
        return {a["class_name"]: a["node_id"] for a in json.loads(out[out.index("["):])} if "[" in out else {}

    def nodes(self) -> dict:
        """node id -> (state, total resources)."""
        return {n["node_id"]: (n["state"], n["resources_total"]) for n in self._state_list("nodes")}

    def _state_list(self, kind: str, timeout: float = 120) -> list:
        """`ray list KIND` as JSON. A head whose job server answers may not serve the state API yet (seen
        under load: exit 0 with no JSON on stdout): ask again until it does, then fail with what it said."""
        deadline = time.time() + timeout
        while True:
            proc = self.run("list", kind, "--format", "json", "--limit", "1000")
            if "[" in proc.stdout:
                return json.loads(proc.stdout[proc.stdout.index("["):])
            if time.time() > deadline:
                raise AssertionError(f"ray list {kind} gave no JSON for {timeout:g} s: {proc.stdout[-1000:]}"
                                     f"{proc.stderr[-1000:]}")
            time.sleep(2)


def wait_for(predicate, timeout: float, what: str, every: float = 0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:g} s waiting for {what}")


def wait_for_step(client: "RayClient", submission_id: str, run_dir: Path, after: int, timeout: float) -> list:
    """Train records once more than `after` exist (files are polled often, the job status seldom: a CLI call
    takes seconds); fails with the job's logs if the job ends first."""
    deadline, polls = time.time() + timeout, 0
    while time.time() < deadline:
        records = train_records(run_dir)
        if len(records) > after:
            return records
        polls += 1
        if polls % 40 == 0 and client.status(submission_id) in ("SUCCEEDED", "FAILED", "STOPPED"):
            pytest.fail(f"job ended before step {after + 1}: {client.logs(submission_id)}")
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:g} s waiting for step {after + 1}")


def train_records(run_dir: Path) -> list:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("kind") == "train"]


@pytest.fixture
def cluster_helpers():
    return {"RayClient": RayClient, "wait_for": wait_for, "train_records": train_records, "PINS": PINS,
            "wait_for_step": wait_for_step,
            "ROOT": ROOT}


@contextlib.contextmanager
def _simulated_cluster(prefix: str, node_resources: list, connect: bool = False):
    """A `ray.cluster_utils.Cluster`: a 1-CPU head plus one 1-CPU node per dict of custom resources in
    `node_resources`, with the fast node-death detection of `cluster.local`. Yields (cluster, nodes, temp);
    `connect=True` also attaches this process (ray.init) for the duration."""
    import ray
    from ray.cluster_utils import Cluster

    from cluster.local import FAST_HEALTH_CHECKS

    temp = tempfile.mkdtemp(prefix=prefix, dir="/tmp")  # short: Ray's socket paths live under it
    cluster = Cluster(initialize_head=True, connect=False, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "temp_dir": temp, "_system_config": FAST_HEALTH_CHECKS})
    try:
        nodes = [cluster.add_node(num_cpus=1, resources=resources, temp_dir=tempfile.mkdtemp(prefix="n", dir=temp))
                 for resources in node_resources]
        cluster.wait_for_nodes(timeout=120)
        if connect:
            ray.init(address=cluster.address, log_to_driver=False)
        yield cluster, nodes, temp
    finally:
        if connect:
            ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def simulated_cluster():
    """The `_simulated_cluster` context manager, for tests that shape their own simulated nodes."""
    return _simulated_cluster
