"""Resuming where no node can take the restarted actor: the smoke run on four simulated nodes (head,
learner, rollout, verifier; `ray.cluster_utils.Cluster`), each role pinned by its node resource. The only node
offering `rollout_node` is killed after the first checkpoint: the run stops within a bounded time with an
error that names `rollout_node` (not 300 s of retries, not a hang). A rollout node is added back and the same
command (resume=auto) continues from the last checkpoint to the end: every step once, every prompt used once."""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from core.records import SelectionTask
from driver.stream import PromptStream

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parent.parent.parent
CACHE = ROOT / ".cache"
# Enough steps that the run cannot finish in the ~17 s Ray takes to declare the killed node dead (with 6, an idle
# machine finished steps 3-6 and the final evaluation inside that window and the run ended 0).
STEPS, PROMPTS, GRACE_S = 40, 4, 5
PINS = ["cluster.learner_node_resource=learner_node", "cluster.rollout_node_resource=rollout_node",
        "cluster.verifier_node_resource=verifier_node"]


@pytest.fixture
def four_nodes(simulated_cluster):
    """Head, then one node per role offering `{role}_node`; yields (cluster, {role: node}, temp)."""
    roles = ("learner", "rollout", "verifier")
    with simulated_cluster("rres", [{f"{role}_node": 1} for role in roles]) as (cluster, nodes, temp):
        yield cluster, dict(zip(roles, nodes)), temp


def _train(cluster, run_dir: Path, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(ROOT)
    argv = [sys.executable, "-m", "driver.train", "smoke", f"run_dir={run_dir}", f"steps={STEPS}",
            f"prompts_per_step={PROMPTS}", "checkpoint_every=2", "algorithm.dynamic_sampling=false",
            "data.num_problems=240",  # ~300 training prompts: STEPS x PROMPTS never wraps into a second epoch
            f"cluster.address={cluster.address}", f"cluster.placement_timeout_s={GRACE_S}",
            f"model.cache_dir={CACHE / 'models'}", f"data.out_dir={CACHE / 'datasets'}", *PINS]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "w"))


def _train_steps(run_dir: Path) -> list:
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []
    return [r["step"] for r in rows if r.get("kind") == "train"]


def _finish(proc: subprocess.Popen, timeout: float, log: Path) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"the run did not end within {timeout:g} s: {log.read_text()[-3000:]}")


def test_multinode_rollout_node_gone_stops_naming_it_and_resume_continues(four_nodes, tmp_path):
    from driver import checkpoint as ckpt

    cluster, nodes, temp = four_nodes
    run_dir = tmp_path / "run"
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    proc = _train(cluster, run_dir, first_log)
    try:
        deadline = time.time() + 900
        while ckpt.latest(run_dir) is None:
            assert proc.poll() is None, f"the run ended before its first checkpoint: {first_log.read_text()[-3000:]}"
            assert time.time() < deadline, "no checkpoint within 900 s"
            time.sleep(0.3)
        killed = time.time()
        cluster.remove_node(nodes["rollout"], allow_graceful=False)  # the only node offering rollout_node
        rc = _finish(proc, 240, first_log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stopped_s = time.time() - killed
    err = first_log.read_text()
    assert rc == 1, err[-3000:]
    assert "no alive node offers rollout_node (cluster.rollout_node_resource)" in err, err[-3000:]
    assert "rollout[0]" in err and "resume=auto" in err
    done = _train_steps(run_dir)
    assert done and done[-1] < STEPS, done
    checkpoint = ckpt.latest(run_dir)

    cluster.add_node(num_cpus=1, resources={"rollout_node": 1}, temp_dir=tempfile.mkdtemp(prefix="n", dir=temp))
    cluster.wait_for_nodes(timeout=120)
    resumed = time.time()
    proc = _train(cluster, run_dir, second_log)
    rc = _finish(proc, 900, second_log)
    out = second_log.read_text()
    assert rc == 0, out[-3000:]
    assert f"[resume] resumed from {checkpoint}" in out, out[-3000:]
    assert _train_steps(run_dir) == list(range(1, STEPS + 1))

    rows = [json.loads(l) for l in (run_dir / "consumed.jsonl").read_text().splitlines() if l.strip()]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    used = [i for row in rows for key in ("trained", "filtered", "stale") for i in row[key]]
    assert len(used) == len(set(used)), "a prompt was used twice"
    assert len([i for row in rows for i in row["trained"]]) == STEPS * PROMPTS
    from core.config import from_yaml

    seed = from_yaml((run_dir / "config.yaml").read_text()).seed
    dataset = Path(json.loads((run_dir / "summary.json").read_text())["dataset"])
    order = PromptStream([SelectionTask.from_dict(json.loads(l)).prompt_id
                          for l in (dataset / "train.jsonl").read_text().splitlines() if l.strip()],
                         seed=seed).take(10_000)
    assert set(used) == set(order[:len(used)]), "a prompt was skipped (lost)"
    print(json.dumps({"kill_to_stop_s": round(stopped_s, 1), "steps_done_when_stopped": done,
                      "resume_to_end_s": round(time.time() - resumed, 1)}))
