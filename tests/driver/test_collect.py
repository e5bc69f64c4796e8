"""RolloutCollector.collect without Ray: the generation calls are faked (a call *is* its list of scored groups),
so the bookkeeping of dynamic sampling, the surplus buffer and the metrics can be checked exactly."""
from types import SimpleNamespace

import pytest

from driver.algo.sample import Rollout, RolloutGroup, SelectionTask
from driver.collect import RolloutCollector


def _group(i: int, rewards: list, version: int = 0) -> RolloutGroup:
    task = SelectionTask(f"q{i}/p0", f"q{i}", "math", "?", ("a", "b"), ("1", "2"), (1.0, 0.0), "1", "...")
    rollouts = [Rollout(task.prompt_id, [1, 2], [3, 4], [-0.5, -0.5], "Judgment: 0", version, "stop", reward=r,
                        verifier_status="ok") for r in rewards]
    return RolloutGroup(task, rollouts, version)


def _collector(later_calls: list) -> RolloutCollector:
    """A collector whose `_wait(call)` returns the call itself and whose refills return `later_calls` in turn."""
    stream = SimpleNamespace(cap=2)
    collector = RolloutCollector(handles=None, tasks_by_id={}, stream=stream, rollout_cfg=None,
                                 on_worker_restart=None)
    collector._wait = lambda call: call
    collector.issue = lambda count, version: [later_calls.pop(0)]
    return collector


def _counted(stats: dict) -> int:
    return sum(v for k, v in stats.items() if k.startswith("dynamic_sampling/"))


def test_surplus_groups_are_counted_once_and_in_the_reward_mean():
    """Surplus groups wait in the buffer for the next step; they must not pass dynamic sampling (and its
    counters) twice, and the step that trains them must include them in reward/all_groups_mean (issue #10
    item 9). Every group is counted once, in the step it finishes (trained or filtered)."""
    informative = [_group(i, [1.0, 0.0]) for i in range(4)]
    all_wrong = _group(9, [0.0, 0.0])
    collector = _collector([[all_wrong]])
    first = collector.collect([informative], version=0, need=2, max_staleness=1, dynamic=True, max_rounds=1)
    assert first.groups == informative[:2] and collector.ready == informative[2:]
    assert first.stats["dynamic_sampling/kept"] == 2 and _counted(first.stats) == 2
    assert first.stats["reward/all_groups_mean"] == pytest.approx(0.5)

    second = collector.collect([[all_wrong]], version=0, need=2, max_staleness=1, dynamic=True, max_rounds=1)
    assert second.groups == informative[2:] and second.filtered_ids == ["q9/p0"]
    assert second.stats["dynamic_sampling/kept"] == 2 and second.stats["dynamic_sampling/all_wrong"] == 1
    assert _counted(first.stats) + _counted(second.stats) == 5  # 5 distinct groups, each counted once
    # the trained surplus (mean 0.5) and the filtered group (0.0): 2 / 6 rewards are 1
    assert second.stats["reward/all_groups_mean"] == pytest.approx(2 / 6)
