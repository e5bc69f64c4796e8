"""A run that the live cluster cannot hold is refused before its placement group is created, naming what is missing,
instead of after cluster.placement_timeout_s: on a local Ray instance of this CPU-only machine, a GPU run fails at
once, with a topology (the one-node GPU config) or without; a cluster with an autoscaler is waited for."""
import logging
import time

import pytest

from cluster.launch import place
from cluster.live import autoscaling, check_live, scaling_from_status
from cluster.placement import PlacementError, plan
from core.config import load_config

READ_ONLY = {"autoscaler_report": {"node_type_mapping": {"ab12": "node_ab12", "cd34": "node_cd34"}}}
AUTOSCALER = {"autoscaler_report": {"node_type_mapping": {"ff00": "ray.head.default", "ee11": "learner"}}}


@pytest.mark.parametrize("status, scaling", [
    (READ_ONLY, False), (AUTOSCALER, True), ({"load_metrics_report": {}}, None), (None, None),
])
def test_the_monitors_status_tells_an_autoscaler_from_the_read_only_provider(status, scaling):
    import json

    assert scaling_from_status(json.dumps(status) if status else None) is scaling


@pytest.fixture(scope="module")
def local_ray():
    """A fresh local Ray instance of 2 CPUs and no GPU, as `driver.train` starts one (cluster.address '')."""
    ray = pytest.importorskip("ray")
    from core.env import quiet_local_ray_auth_notice

    quiet_local_ray_auth_notice()
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def _placement(name, *overrides):
    cfg = load_config(name, list(overrides))
    return plan(cfg.learner, cfg.rollout, cfg.verifier, cfg.cluster), cfg.cluster


@pytest.mark.slow
def test_a_gpu_run_on_a_cpu_only_instance_fails_at_once_naming_what_is_missing(local_ray):
    placement, cluster = _placement("paper_math_1node")  # topology gpu_1node: 8 GPUs on one node
    started = time.time()
    with pytest.raises(PlacementError) as err:
        place(placement, cluster)
    assert time.time() - started < 10  # not cluster.placement_timeout_s
    text = str(err.value)
    assert text.startswith("the running Ray cluster (1 alive node: {CPU: 2, GPU: 0}) cannot hold the run and has no "
                           "autoscaler to add nodes (cluster.topology=gpu_1node lists nodes it lacks"), text
    assert "8 GPU needed, 0 available" in text and "48 CPU needed, 2 available" in text
    assert local_ray.util.placement_group_table() == {}  # no group was created

    placement, cluster = _placement("smoke", "learner.num_gpus=1")  # no topology: the live nodes alone
    with pytest.raises(PlacementError, match=r"1 GPU needed, 0 available\). Actors: learner\[0\]: 1 CPU 1 GPU"):
        place(placement, cluster)


@pytest.mark.slow
def test_a_cluster_with_an_autoscaler_is_waited_for(local_ray, monkeypatch, caplog):
    placement, cluster = _placement("paper_math_1node", "cluster.address=auto")
    monkeypatch.setattr("cluster.live.autoscaling", lambda: True)
    with caplog.at_level(logging.WARNING, logger="genselect.cluster"):
        check_live(placement, cluster, local=False)  # no error: the autoscaler may add the node
    assert "does not hold the run yet" in caplog.text and "its autoscaler" in caplog.text
    assert "8 GPU needed, 0 available" in caplog.text


@pytest.mark.slow
def test_the_local_instance_reports_no_autoscaler(local_ray):
    deadline = time.time() + 60  # the monitor reports every few seconds
    while autoscaling() is None and time.time() < deadline:
        time.sleep(1)
    assert autoscaling() is False
