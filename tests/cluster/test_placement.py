"""Placement planning is a pure function of the config and refuses, clearly, what cannot fit."""
import pytest

from cluster.placement import PlacementError, bundle_indices, check_fits, plan
from core.config import load_config


def _plan(*overrides):
    cfg = load_config("selector", list(overrides))
    return plan(cfg.learner, cfg.rollout, cfg.verifier, cfg.cluster)


def test_default_plan_fits_two_cores():
    placement = _plan()
    assert placement.totals() == {"CPU": 2.0, "GPU": 0.0}
    check_fits(placement, {"CPU": 2.0})
    assert [s.role for s in placement.grouped] == ["learner", "rollout"]
    assert bundle_indices(placement) == {("learner", 0): 0, ("rollout", 0): 1}


@pytest.mark.parametrize("overrides, available, message", [
    (["learner.num_ranks=4"], {"CPU": 2.0}, "5 CPU needed, 2 available"),
    (["rollout.num_gpus=1"], {"CPU": 8.0}, "1 GPU needed, 0 available"),
    (["learner.num_gpus=1.5"], {"CPU": 8.0, "GPU": 4.0}, "must be whole"),
])
def test_unplaceable_configs_fail_before_any_actor(overrides, available, message):
    with pytest.raises(PlacementError, match=message):
        check_fits(_plan(*overrides), available)


def test_gpu_plan_counts_every_actor():
    placement = _plan("learner.num_ranks=2", "learner.num_gpus=1", "rollout.num_workers=2", "rollout.num_gpus=1")
    assert placement.totals()["GPU"] == 4.0
    check_fits(placement, {"CPU": 8.0, "GPU": 4.0})


def test_each_actor_gets_the_deepspeed_accelerator_of_its_own_resources():
    """A driver on a CPU head sets DS_ACCELERATOR=cpu for itself (core/env.py); a learner rank holding a GPU must
    not inherit it (DeepSpeed would run its ops on the CPU accelerator beside a CUDA model)."""
    from cluster.placement import ActorSlot, actor_env

    driver_env = {"DS_ACCELERATOR": "cpu", "HF_HUB_OFFLINE": "1"}
    gpu = actor_env(ActorSlot("learner", 0, 8, 1, ""), driver_env)
    cpu = actor_env(ActorSlot("verifier", 0, 2.5, 0, ""), driver_env)
    assert gpu == {"DS_ACCELERATOR": "cuda", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "8"}
    assert cpu == {"DS_ACCELERATOR": "cpu", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "3"}
    assert actor_env(ActorSlot("rollout", 0, 1, 0.5, ""), {})["DS_ACCELERATOR"] == "cuda"
