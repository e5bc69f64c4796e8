"""Node-level placement across several nodes: pinned roles go only to the nodes that offer their resource,
a run that no node (or no combination of nodes) can hold is refused naming what is missing, and `--plan`
prints the layout without starting anything."""
import subprocess
import sys
from pathlib import Path

import pytest

from cluster import topology
from cluster.layout import describe, fit_nodes
from cluster.placement import PlacementError, plan
from core.config import load_config

ROOT = Path(__file__).resolve().parent.parent.parent
PINS = ["cluster.learner_node_resource=learner_node", "cluster.rollout_node_resource=rollout_node",
        "cluster.verifier_node_resource=verifier_node"]


def _plan(*overrides, name="smoke"):
    cfg = load_config(name, list(overrides))
    return plan(cfg.learner, cfg.rollout, cfg.verifier, cfg.cluster)


def test_pinned_roles_land_on_their_node_types():
    placement = _plan(*PINS)
    nodes = topology.load("local3").nodes("max")
    chosen = fit_nodes(placement, nodes)
    types = {s.role: nodes[n][0] for s, n in zip(placement.grouped, chosen)}
    assert types == {"learner": "learner", "rollout": "rollout", "verifier": "verifier"}
    assert placement.grouped[2].bundle() == {"verifier_node": 0.001}  # a 0-CPU verifier joins the group


@pytest.mark.parametrize("overrides, nodes, message", [
    (PINS, [("head", {"CPU": 8})], "no node offers learner_node"),
    (["rollout.num_cpus=2"], [("a", {"CPU": 1}), ("b", {"CPU": 1}), ("c", {"CPU": 1})],
     "2 CPU needed, the largest node has 1"),
    (["learner.num_ranks=2", "cluster.learner_node_resource=learner_node"],
     [("head", {"CPU": 4}), ("learner", {"CPU": 1, "learner_node": 1})],
     "on the nodes offering learner_node: 2 CPU needed, 1 available"),
    (["cluster.placement_strategy=STRICT_PACK"], [("a", {"CPU": 1}), ("b", {"CPU": 1})], "STRICT_PACK"),
    (["rollout.num_gpus=1"], [("a", {"CPU": 8})], "1 GPU needed, 0 available"),
])
def test_unplaceable_runs_are_refused_naming_the_missing_resources(overrides, nodes, message):
    with pytest.raises(PlacementError, match=message):
        fit_nodes(_plan(*overrides), nodes)


def test_totals_that_fit_but_no_single_node_does_are_refused():
    # 2 CPUs in all, but a 2-CPU learner on 1-CPU nodes: a check of the cluster's totals alone passes this
    with pytest.raises(PlacementError, match="learner\\[0\\] needs"):
        fit_nodes(_plan("learner.num_cpus=2", "rollout.num_cpus=0"), [("a", {"CPU": 1}), ("b", {"CPU": 1})])


def test_paper_math_layout_on_the_paper_topology():
    placement = _plan(name="paper_math")
    text = describe(placement, topology.load("paper_gpu").nodes("max"), "paper")
    assert all(f"learner[{i}]    learner-0" in text and f"rollout[{i}]    rollout-0" in text for i in range(8))
    assert "nodes used: head 0 of 1, rollout 1 of 2, learner 1 of 1, verifier 1 of 4" in text
    assert text.count("bundle ") == 20


def _train(*args):
    return subprocess.run([sys.executable, "-m", "driver.train", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_plan_flag_prints_the_layout_and_starts_nothing():
    out = _train("smoke", "--plan", "cluster.topology=local3", *PINS)
    assert out.returncode == 0, out.stderr
    assert "rollout[0]    rollout-0" in out.stdout and "bundle 2" in out.stdout
    assert "Ray instance" not in out.stderr  # nothing was started
    refused = _train("paper_math", "--plan", "cluster.topology=local3")
    assert refused.returncode == 2
    assert "16 GPU needed, 0 available" in refused.stderr
    dry = _train("smoke", "cluster.dry_run=true")
    assert dry.returncode == 0 and "placement on this machine" in dry.stdout


def test_paper_math_1node_lays_out_on_one_gpu_node_with_no_overrides():
    out = _train("paper_math_1node", "--plan")
    assert out.returncode == 0, out.stderr
    assert "placement on topology gpu-1node" in out.stdout and "nodes used: head 1 of 1" in out.stdout
    assert "totals: {CPU: 48, GPU: 8}" in out.stdout and out.stdout.count(" -> head-0") == 10
    cfg = load_config("paper_math_1node")
    assert (cfg.learner.num_ranks, cfg.rollout.num_workers) == (4, 4)
    assert cfg.weight_sync.check_every == 1 and cfg.weight_sync.transport["name"] == "nccl"
    assert not (cfg.cluster.learner_node_resource or cfg.cluster.rollout_node_resource
                or cfg.cluster.verifier_node_resource)
    assert cfg.eval_prompts and cfg.eval_prompts <= 256 and cfg.eval_samples == 0  # sized for 4 engines
    # the paper's training settings, from its base
    paper = load_config("paper_math")
    assert (cfg.prompts_per_step, cfg.rollout.samples_per_prompt, cfg.learner.lr) == \
        (paper.prompts_per_step, paper.rollout.samples_per_prompt, paper.learner.lr)


def test_every_topology_loads():
    for path in topology.TOPOLOGY_DIR.glob("*.yaml"):
        topo = topology.load(str(path))
        assert topo.head.resources["CPU"] >= 1 and (topo.workers or topo.head.resources.get("GPU"))
