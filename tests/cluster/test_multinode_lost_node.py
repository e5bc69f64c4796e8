"""A restarted actor that no node can take: the node holding the rollout bundle, the only node
offering `rollout_node`, dies. Ray keeps the actor RESTARTING and the group RESCHEDULING for as long as no
node offers that resource; the bounded wait the driver uses while Ray restarts a rollout actor
(cluster/recovery.py: `wait_for_actors` with a `PlacementWatch`) stops with an error naming `rollout_node`
after its grace, instead of waiting forever. Once a node offering it is back, the same actor is restarted
there and answers (the driver's side of that, `resume=auto`, is tests/cluster/test_multinode_resume.py)."""
import time

import pytest

from cluster.placement import ActorSlot, PlacementPlan, actor_options, create_group
from cluster.recovery import LostPlacement, PlacementWatch, wait_for_actors, why_no_node

GRACE_S = 2.0
PLAN = PlacementPlan((ActorSlot("learner", 0, 1.0, 0.0), ActorSlot("rollout", 0, 1.0, 0.0, "rollout_node")), "PACK")


def test_why_no_node_names_the_missing_resources():
    rollout = PLAN.grouped[1]
    totals = {"head": {"CPU": 1.0}, "spare": {"CPU": 2.0, "rollout_node": 1.0}}
    assert why_no_node(rollout, {"head": {"CPU": 0.0}, "spare": {"CPU": 2.0, "rollout_node": 1.0}}, totals) is None
    assert why_no_node(rollout, {"head": {"CPU": 0.0}}, {"head": {"CPU": 1.0}}) == \
        "no alive node offers rollout_node (cluster.rollout_node_resource)"
    assert why_no_node(ActorSlot("rollout", 0, 4.0, 0.0), {"n": {"CPU": 2.0}}, {"n": {"CPU": 2.0}}) == \
        "4 CPU needed, the largest alive node has 2"
    assert "taken by the run's other actors" in why_no_node(rollout, {"spare": {"CPU": 0.0, "rollout_node": 1.0}},
                                                            totals)


class Probe:
    def health(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


@pytest.fixture
def two_nodes(simulated_cluster):
    """A head (1 CPU) and one node offering rollout_node, with this process attached; yields (cluster, node)."""
    with simulated_cluster("rlost", [{"rollout_node": 1}], connect=True) as (cluster, nodes, _):
        yield cluster, nodes[0]


@pytest.mark.slow  # starts Ray (two nodes, two small actors); about 40 s on the 2-core machine
def test_multinode_lost_rollout_node_fails_naming_the_resource_then_restarts_when_it_is_back(two_nodes):
    import ray

    cluster, node = two_nodes
    group = create_group(PLAN, 60)
    learner = ray.remote(**actor_options(PLAN.slots[0], group, 0, max_restarts=0))(Probe).remote()
    rollout = ray.remote(**actor_options(PLAN.slots[1], group, 1, max_restarts=3))(Probe).remote()
    assert ray.get(rollout.health.remote(), timeout=120) == node.node_id
    watch = PlacementWatch(PLAN, group, GRACE_S)
    wait_for_actors([learner, rollout], watch, timeout_s=60)
    assert watch.unplaceable() == []

    killed = time.monotonic()
    cluster.remove_node(node, allow_graceful=False)  # SIGKILL: as when the machine dies
    while True:  # the driver waits for a restart once a call failed; the worker may answer for a moment first
        try:
            ray.get(rollout.health.remote(), timeout=5)
        except Exception:
            break
        assert time.monotonic() - killed < 60, "the killed node's actor still answers"
        time.sleep(0.2)
    with pytest.raises(LostPlacement) as err:
        wait_for_actors([rollout], watch, timeout_s=120)
    waited = time.monotonic() - killed
    message = str(err.value)
    assert "rollout[0]" in message and "no alive node offers rollout_node (cluster.rollout_node_resource)" in message
    assert "learner" not in message  # its node is alive and still holds its bundle
    print(f"lost placement reported {waited:.1f} s after the kill: {message}")
    assert GRACE_S <= waited < 60, waited  # node death noticed in seconds, then the grace; never the 120 s deadline
    assert ray.util.placement_group_table(group)["state"] == "RESCHEDULING"

    back = cluster.add_node(num_cpus=1, resources={"rollout_node": 1})
    wait_for_actors([rollout], watch, timeout_s=120)  # the same handle answers again, from the new node
    assert ray.get(rollout.health.remote(), timeout=60) == back.node_id
    assert ray.get(learner.health.remote(), timeout=60) == cluster.head_node.node_id
    assert watch.unplaceable() == []
