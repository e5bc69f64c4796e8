"""RolloutCollector.collect without Ray: the generation calls are faked (a call *is* its list of scored groups),
so the bookkeeping of dynamic sampling, the surplus buffer and the metrics can be checked exactly."""
from types import SimpleNamespace

import pytest

from core.records import Rollout, RolloutGroup, SelectionTask
from driver.step import RolloutCollector


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
    counters) twice, and the step that trains them must include them in reward/all_groups_mean.
    Every group is counted once, in the step it finishes (trained or filtered)."""
    informative = [_group(i, [1.0, 0.0]) for i in range(4)]
    all_wrong = _group(9, [0.0, 0.0])
    collector = _collector([[all_wrong]])
    first = collector.collect([informative], version=0, need=2, max_rounds=1)
    assert first.groups == informative[:2] and collector.ready == informative[2:]
    assert first.stats["dynamic_sampling/kept"] == 2 and _counted(first.stats) == 2
    assert first.stats["reward/all_groups_mean"] == pytest.approx(0.5)

    second = collector.collect([[all_wrong]], version=0, need=2, max_rounds=1)
    assert second.groups == informative[2:] and second.filtered_ids == ["q9/p0"]
    assert second.stats["dynamic_sampling/kept"] == 2 and second.stats["dynamic_sampling/all_wrong"] == 1
    assert _counted(first.stats) + _counted(second.stats) == 5  # 5 distinct groups, each counted once
    # the trained surplus (mean 0.5) and the filtered group (0.0): 2 / 6 rewards are 1
    assert second.stats["reward/all_groups_mean"] == pytest.approx(2 / 6)


def _simulate(steps: int, resume_at=None, need: int = 2) -> tuple:
    """The loop of driver.train with max_staleness=1 and dynamic sampling on, on a faked engine whose rewards
    depend on how often a prompt was generated (a regenerated group comes out differently, as sampling would).
    With `resume_at`, the run is checkpointed after that step and continued by a fresh collector restored
    from the checkpointed stream state (what driver.run does). Returns (ids drawn from the stream's permutation
    in order, ids finished, ids unfinished at the end, trained ids per step)."""
    from collections import Counter, deque

    from driver.step import Issued
    from driver.curriculum import CurriculumStream

    ids = [f"q{i}/p0" for i in range(40)]
    sizes = {i: 2 for i in ids}
    generated = Counter()

    def make_collector(stream):
        collector = RolloutCollector(SimpleNamespace(rollouts=[None]), {}, stream, None, None)
        collector._call = lambda worker, prompt_ids, version: Issued(worker, list(prompt_ids), None, version)

        def wait(call):
            collector.inflight.remove(call)
            out = []
            for pid in call.prompt_ids:
                generated[pid] += 1
                k = int(pid[1:].split("/")[0]) + generated[pid]
                out.append(_group(int(pid[1:].split("/")[0]), [1.0, 0.0] if k % 3 else [0.0, 0.0], call.version))
            return out
        collector._wait = wait
        return collector

    stream = CurriculumStream(ids, sizes, [2])
    collector, pending, version = make_collector(stream), deque(), 0
    finished, trained = [], []
    for step in range(steps):
        if not pending:
            pending.append(collector.issue(3, version))
        got = collector.collect(pending.popleft(), version, need, 2)
        pending.append(collector.issue(3, version))
        trained.append([g.task.prompt_id for g in got.groups])
        finished += trained[-1] + got.filtered_ids + got.stale_ids
        version += 1
        if step + 1 == resume_at:  # checkpoint, "crash", resume: in-flight and surplus ids are re-issued
            state = stream.state(collector.unfinished_ids())
            assert collector.ready, "the scenario must have surplus groups at the checkpoint"
            stream = CurriculumStream.restore(ids, sizes, [2], state)
            collector, pending = make_collector(stream), deque()
    permutation = stream._stream(0)
    drawn = [permutation.at(p) for p in range(permutation.position)]
    return drawn, finished, collector.unfinished_ids(), trained


def test_resume_guarantee_prompts_once_batches_may_differ():
    """What resume guarantees (docs/training.md, "Resume"): every prompt drawn before the checkpoint
    is finished exactly once, before it or after it (none lost, none twice), and new prompts come in the
    uninterrupted run's order; the batches are NOT guaranteed equal: the in-flight and surplus groups are
    regenerated, and with dynamic sampling a regenerated group can be kept or filtered differently."""
    straight = _simulate(6)
    resumed = _simulate(6, resume_at=2)
    for drawn, finished, unfinished, _ in (straight, resumed):
        assert len(drawn) == len(set(drawn))  # no epoch wrap in this scenario
        assert sorted(finished + unfinished) == sorted(drawn)  # each drawn prompt finished once or still pending
    shorter = min(len(straight[0]), len(resumed[0]))
    assert straight[0][:shorter] == resumed[0][:shorter]  # one order of new prompts
    assert resumed[3][:2] == straight[3][:2]  # identical up to the checkpoint ...
    assert resumed[3] != straight[3]  # ... and not after it: regenerated groups were filtered differently


def test_a_call_past_the_drivers_deadline_is_aborted_before_the_restart_sync(monkeypatch):
    """When the driver gives up on a generation call (its deadline passed), the rollout actor's generate call
    itself is aborted (its engine requests too) and confirmed *before* the restart's weight sync, whose drain would
    otherwise wait for the abandoned call; cancelling the verifier's scoring alone would leave the generate call
    running."""
    import ray
    from ray.exceptions import GetTimeoutError

    from driver.step import Issued

    events, deadlines = [], []

    class Remote:
        def __init__(self, name):
            self.name = name

        def remote(self, *args, **kwargs):
            events.append((self.name, kwargs.get("call_id", args[0] if args else None)))
            return (self.name, len(events))

    rollout = SimpleNamespace(generate=Remote("generate"), abort=Remote("abort"))
    verifier = SimpleNamespace(score_groups=Remote("score"))
    handles = SimpleNamespace(rollouts=[rollout], verifiers=[verifier])
    groups = [_group(0, [1.0, 0.0])]

    def fake_get(ref, timeout=None):
        if ref[0] == "score" and ref[1] <= 2:  # the first call's scoring never comes back in time
            deadlines.append(timeout)
            raise GetTimeoutError("deadline")
        return {"aborted": 1, "in_flight": 0} if ref[0] == "abort" else groups

    monkeypatch.setattr(ray, "get", fake_get)
    monkeypatch.setattr(ray, "cancel", lambda ref, force=False: events.append(("cancel", ref[0])))
    collector = RolloutCollector(handles, {"q0/p0": groups[0].task}, SimpleNamespace(cap=2), None,
                                 lambda worker: events.append(("restart", worker)),
                                 deadline_s=lambda prompts: 123.0 * prompts)
    call = collector._call(0, ["q0/p0"], 0)
    collector.inflight.append(call)
    assert isinstance(call, Issued) and call.call_id
    assert collector._wait(call) == groups
    assert deadlines == [123.0]
    names = [e[0] for e in events]
    assert names[:5] == ["generate", "score", "cancel", "abort", "restart"], events
    assert events[3][1] == call.call_id  # the abandoned call, by its id
    assert collector.counters["rollout/aborted_calls"] == 1 and not collector.inflight
