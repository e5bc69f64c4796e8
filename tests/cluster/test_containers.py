"""The project's CPU image (`make image`: cluster/image/build.sh on a locally bootstrapped Debian) run for real: the
smoke job inside one container (`docker run ... python -m driver.train smoke`), and a cluster of containers
(cluster.containers: a head and the four worker nodes of local3, each its own container on the host network, token
authentication on) that takes the smoke job from `ray job submit` on the host, keeps the roles on their node
types, and goes on training when the container holding the rollout engine is killed mid-run: no prompt is lost or
used twice. They take 4-7 min on 2 cores, so `make test` leaves them out: `python benchmarks/containers.py` runs
them (GENSELECT_CONTAINER_TESTS=1) and records their times. Skipped, with the reason, also where no engine can run,
or the image is missing or was built from other sources than this checkout (`make image` builds it)."""
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from cluster import containers, topology
from cluster.kuberay.generate import default_image
from core.net import free_port
from sandbox import engine as docker_engine
from tests.cluster.test_multinode import _stream_order

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parent.parent.parent
SMOKE_SHM = "8g"  # Ray's object store (30% of memory) falls back to slower /tmp when /dev/shm is smaller
STEPS, PROMPTS = 100, 4  # a smoke step takes ~0.2 s here: enough of them to find the actors and kill a node mid-run
ROLES = {"Learner": "learner", "RolloutWorker": "rollout", "VerifierPool": "verifier"}
# The digest of the code an image holds (run in the image against /app, and here against the checkout)
DIGEST = """
import hashlib, pathlib, sys
root, h = pathlib.Path(sys.argv[1]), hashlib.sha256()
for top in ("core", "actors", "cluster", "driver", "sandbox", "configs"):
    for p in sorted((root / top).rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
            h.update(str(p.relative_to(root)).encode() + b"\\0" + p.read_bytes())
print(h.hexdigest())
"""


def _digest_in(image: str) -> str:
    done = subprocess.run(["docker", "run", "--rm", "--network", "none", image, "python", "-c", DIGEST, "/app"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _digest_here() -> str:
    return subprocess.run(["python3", "-c", DIGEST, str(ROOT)], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def engine():
    """An engine that answers (started here if need be, and stopped again), for the opt-in container runs."""
    if os.environ.get("GENSELECT_CONTAINER_TESTS") != "1":
        pytest.skip("container runs (4-7 min) are opt-in: python benchmarks/containers.py, or GENSELECT_CONTAINER_TESTS=1")
    try:
        started = docker_engine.start()
    except docker_engine.EngineUnavailable as exc:
        pytest.skip(str(exc))
    yield started
    docker_engine.stop(started)


def _current_image(flavour: str) -> str:
    """The image `cluster/image/build.sh FLAVOUR` builds, if it holds this checkout's code; a skip otherwise."""
    tag = default_image(flavour)
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode != 0:
        pytest.skip(f"image {tag} is not built: `sh cluster/image/build.sh {flavour}` builds it")
    if _digest_in(tag) != _digest_here():
        pytest.skip(f"image {tag} holds other sources than this checkout: `sh cluster/image/build.sh {flavour}` "
                    "rebuilds it")
    return tag


@pytest.fixture(scope="module")
def cpu_image(engine):
    return _current_image("cpu")


def _in(image: str, *command: str, timeout: float = 300) -> str:
    done = subprocess.run(["docker", "run", "--rm", "--network", "none", image, *command], capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def _pins(lines: list[str]) -> dict:
    """name -> version of the `name==version` lines (comments dropped, names normalised)."""
    pairs = (line.split("#")[0].strip().partition("==") for line in lines)
    return {n.lower().replace("_", "-"): v for n, sep, v in pairs if sep}


def test_the_cpu_image_holds_the_pinned_environment(cpu_image):
    """Every transitive pin that passed the suite (requirements/cpu-constraints.txt), at its version."""
    installed = _pins(_in(cpu_image, "pip", "freeze").splitlines())
    pinned = _pins((ROOT / "requirements" / "cpu-constraints.txt").read_text().splitlines())
    assert {n: (v, installed.get(n)) for n, v in pinned.items() if installed.get(n) != v} == {}


def test_the_gpu_image_holds_its_stack_and_lays_out_the_paper_run(engine):
    """No GPU here: the CUDA builds import, pip finds nothing broken, and the paper run is laid out on its
    topology (`--plan` starts nothing)."""
    image = _current_image("gpu")
    versions = _in(image, "python", "-c", "import torch, vllm, deepspeed, ray; "
                   "print(torch.__version__, vllm.__version__, deepspeed.__version__, ray.__version__)")
    versions = versions.splitlines()[-1].split()  # DeepSpeed logs a line of its own before
    assert versions[0].startswith("2.13.0+cu") and versions[1:] == ["0.32.0", "0.19.8", "2.60.0"], versions
    assert "No broken requirements" in _in(image, "pip", "check")
    plan = _in(image, "python", "-m", "driver.train", "paper_math", "--plan", "cluster.topology=paper_gpu")
    assert "nodes used: head 0 of 1, rollout 1 of 2, learner 1 of 1, verifier 1 of 4" in plan, plan[-2000:]


@pytest.fixture
def shared():
    """A folder every container mounts at the same path, writable by the image's user `ray`."""
    path = tempfile.mkdtemp(prefix="genselect-containers-", dir="/var/tmp")
    os.chmod(path, 0o777)
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


def _report(name: str, figures: dict) -> None:
    """Times for benchmarks/containers.py (GENSELECT_BENCH_OUT), printed too."""
    out = os.environ.get("GENSELECT_BENCH_OUT")
    if out:
        (Path(out) / f"{name}.json").write_text(json.dumps(figures, indent=1))
    print(json.dumps(figures))


def _train_steps(run_dir: Path) -> list:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["step"] for r in rows if r.get("kind") == "train"]


def test_the_smoke_job_runs_inside_one_container(cpu_image, shared):
    """No network at all (Ray's local instance needs only the container's loopback); a fresh container prepares
    the data and the model itself."""
    start = time.time()
    run = subprocess.run(["docker", "run", "--rm", "--network", "none", f"--shm-size={SMOKE_SHM}", "-v",
                          f"{shared}:{shared}", cpu_image, "python", "-m", "driver.train", "smoke",
                          f"run_dir={shared}/smoke"], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert _train_steps(shared / "smoke") == [1, 2, 3]
    summary = json.loads((shared / "smoke" / "summary.json").read_text())
    assert summary["steps"] == 3
    _report("container_smoke", {"docker_run_s": time.time() - start, "run_wall_s": summary["wall_seconds"]})


@pytest.fixture
def container_cluster(cpu_image, shared, tmp_path):
    """(description, token file) of local3 as a cluster of containers; removed afterwards."""
    token = tmp_path / "token"
    cluster = containers.start(topology.load("local3"), cpu_image, free_port(), str(token), str(shared),
                               prefix=f"genselect-test-{os.getpid()}")
    try:
        yield cluster, token
    finally:
        containers.remove(cluster)


def _actor_containers(names: list[str]) -> dict:
    """Actor class -> the containers running a process of it (Ray titles an actor's process ray::<class>)."""
    found = {}
    for name in names:
        top = subprocess.run(["docker", "top", name, "-eo", "pid,args"], capture_output=True, text=True, timeout=60)
        assert top.returncode == 0, f"docker top {name}: {top.stderr}"
        for role in ROLES:
            if f"ray::{role}" in top.stdout:
                found.setdefault(role, []).append(name)
    return found


def _submit(client, submission_id: str, *args) -> None:
    for _ in range(30):  # a fresh head's job server answers before its job agent is up
        proc = client.run("job", "submit", "--no-wait", "--submission-id", submission_id, "--", *args, check=False)
        if "No available agent" not in proc.stdout + proc.stderr:
            break
        time.sleep(2)
    assert proc.returncode == 0, f"ray job submit: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"


def test_a_cluster_of_containers_runs_the_smoke_job_and_survives_a_killed_node(container_cluster, shared,
                                                                               cluster_helpers):
    h = cluster_helpers
    cluster, token = container_cluster
    client = h["RayClient"](cluster["dashboard"], {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})
    h["wait_for"](lambda: client.run("job", "list", check=False).returncode == 0, 240, "the head's job server", every=2)
    assert client.refuses_a_wrong_token()
    alive = lambda: {n["node_id"]: n["node_ip"] for n in client._state_list("nodes") if n["state"] == "ALIVE"}  # noqa
    h["wait_for"](lambda: len(alive()) == len(cluster["nodes"]), 240, "every container's node", every=3)
    by_ip = {n["ip"]: n for n in cluster["nodes"]}
    container_of = {nid: by_ip[ip] for nid, ip in alive().items()}  # each node at its own loopback address
    assert sorted(by_ip) == sorted(alive().values()) and all(ip.startswith("127.") for ip in by_ip)

    nodes_up_s = time.time() - cluster["time"]  # from the first `docker run`
    run_dir = shared / "run"
    submitted = time.time()
    _submit(client, "containers", "python", "-m", "driver.train", "smoke", f"run_dir={run_dir}",
            f"model.cache_dir={shared}/models", f"data.out_dir={shared}/datasets", f"steps={STEPS}",
            f"prompts_per_step={PROMPTS}", "checkpoint_every=50", "algorithm.dynamic_sampling=false", *h["PINS"])
    h["wait_for_step"](client, "containers", run_dir, 0, 900)
    names = [n["container"] for n in cluster["nodes"]]
    where = h["wait_for"](lambda: (lambda f: set(ROLES) <= set(f) and f)(_actor_containers(names)), 60,
                          "the actors' processes", every=0.2)
    node_type = {n["container"]: n["type"] for n in cluster["nodes"]}
    assert {role: [node_type[c] for c in found] for role, found in where.items()} == \
        {role: [kind] for role, kind in ROLES.items()}, where

    dead = where["RolloutWorker"][0]
    # frozen at once (a kill takes seconds here, and a smoke step ~0.2 s), then killed: as a machine that dies
    subprocess.run(["docker", "pause", dead], check=True, capture_output=True, timeout=60)
    killed_at, done_before = time.time(), len(h["train_records"](run_dir))
    subprocess.run(["docker", "kill", dead], check=True, capture_output=True, timeout=60)
    assert done_before < STEPS, "the run ended before the node died"
    h["wait_for_step"](client, "containers", run_dir, done_before, 600)
    kill_to_next_step_s = time.time() - killed_at
    assert client.wait("containers") == "SUCCEEDED", client.logs("containers")
    moved = client.alive_actors(alive=False)["RolloutWorker"]  # the node it ran on last (restarted there)
    assert container_of[moved]["type"] == "rollout" and container_of[moved]["container"] != dead
    assert [client.nodes()[n][0] for n, c in container_of.items() if c["container"] == dead] == ["DEAD"]

    train = h["train_records"](run_dir)
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    assert train[-1].get("rollout/reissued_calls", 0) + train[-1].get("rollout/sync_retries", 0) >= 1, train[-1]
    rows = [json.loads(line) for line in (run_dir / "consumed.jsonl").read_text().splitlines() if line.strip()]
    used = [i for row in rows for key in ("trained", "filtered", "stale") for i in row[key]]
    # 400 prompts from a 100-prompt split: the stream's later epochs repeat them, and only as it orders them
    assert Counter(used) == Counter(_stream_order(run_dir)[:len(used)]), "a prompt was lost or used twice"
    assert len([i for row in rows for i in row["trained"]]) == STEPS * PROMPTS
    _report("container_cluster", {"nodes_alive_s": nodes_up_s, "submit_to_end_s": time.time() - submitted,
                                  "kill_to_next_step_s": kill_to_next_step_s, "killed_after_step": done_before,
                                  "step_s": [r["time/step_s"] for r in train]})
