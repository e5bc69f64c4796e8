"""driver.train.train_loop without Ray: a fake run whose engine is the test's, so the order of the stages and
what each stage hands the next can be checked exactly (collect -> filter -> shaping and advantages -> shard
-> learner step -> weight sync)."""
from types import SimpleNamespace

import pytest

from core.config import AlgorithmConfig, RolloutConfig, WeightSyncConfig
from core.records import Rollout, RolloutGroup, SelectionTask
from driver.step import Issued, RolloutCollector
from driver.curriculum import CurriculumStream
from driver.train import train_loop


def _group(pid: str, rewards: list, version: int) -> RolloutGroup:
    task = SelectionTask(pid, pid.split("/")[0], "math", "?", ("a", "b"), ("1", "2"), (1.0, 0.0), "1", "...")
    prompt = [1, 2, int(pid[1:].split("/")[0]) + 3]
    rollouts = [Rollout(pid, prompt, [3, 4], [-0.5, -0.5], "Judgment: 0", version, "stop", reward=r,
                        verifier_status="ok") for r in rewards]
    return RolloutGroup(task, rollouts, version)


class _Remote:
    """`actor.method.remote(...)` of a fake actor: runs `fn` at once (FakeFleet.call hands back the results)."""

    def __init__(self, fn):
        self.remote = fn


class FakeFleet:
    """What the loop's stages 5 and 6 (driver.step.learner_step, sync_weights, check_sync) use of driver.fleet.Fleet:
    two learner ranks, a broadcaster and `call`; each rank's step and each sync append to the run's `calls`."""

    def __init__(self, calls: list, cfg):
        self.version, self.calls, self.sync_retries, self.cfg = 0, calls, 0, cfg
        self.handles = SimpleNamespace(learners=[self._learner(rank) for rank in range(2)], rollouts=[])
        self.broadcaster = SimpleNamespace(sync=self._sync)

    @property
    def num_learners(self):
        return len(self.handles.learners)

    def _learner(self, rank: int):
        def train_step(shard, global_num_tokens, step):
            self.calls.append(("learner_step", rank, step, len(shard), global_num_tokens))
            return {"loss": 0.0}

        def compute_logprobs(sequences, temperature=None):  # only an off-policy estimator or the sync check
            raise AssertionError("learner log-probs asked for")
        return SimpleNamespace(train_step=_Remote(train_step), compute_logprobs=_Remote(compute_logprobs))

    def _sync(self, version):
        self.calls.append(("sync_weights", version))
        return {"seconds": 0.0}

    def call(self, refs, timeout, what):
        return refs


class FakeRun:
    """What train_loop uses of driver.run.Run; every stage call is appended to `calls`."""

    def __init__(self, max_staleness: int, flat: set):
        ids = [f"q{i}/p0" for i in range(40)]
        self.cfg = SimpleNamespace(max_staleness=max_staleness, prompts_per_step=2, checkpoint_every=100,
                                   export_every=0,
                                   algorithm=AlgorithmConfig(overlong_buffer_len=2),
                                   rollout=RolloutConfig(max_response_tokens=8), weight_sync=WeightSyncConfig())
        self.calls = []
        self.fleet = FakeFleet(self.calls, SimpleNamespace(learner=SimpleNamespace(step_timeout_s=60, zero_stage=2),
                                                           weight_sync=self.cfg.weight_sync))
        self.collector = RolloutCollector(SimpleNamespace(rollouts=[None]), {},
                                          CurriculumStream(ids, {i: 2 for i in ids}, [2]), None, None)
        self.collector._call = lambda worker, prompt_ids, version: Issued(worker, list(prompt_ids), None, version)

        def wait(call):  # prompts in `flat` come back with equal rewards (dynamic sampling drops them)
            self.collector.inflight.remove(call)
            return [_group(p, [1.0, 1.0] if p in flat else [1.0, 0.0], call.version) for p in call.prompt_ids]
        self.collector._wait = wait

    @property
    def version(self):
        return self.fleet.version

    def extra_rows(self, sequences, groups, step):  # stage 3b's hook: adds nothing here
        self.calls.append(("extra_rows", step, len(sequences.sequences), len(groups)))
        return sequences

    def record_step(self, step, collected, metrics, times):
        self.calls.append(("record_step", step, [g.task.prompt_id for g in collected.groups],
                           collected.filtered_ids, bool(metrics)))

    def should_evaluate(self, step):
        return False

    def checkpoint(self, step):
        self.calls.append(("checkpoint", step))

    def should_export(self, step):
        from driver.run import Run

        return Run.should_export(self, step)

    def export(self, step):
        self.calls.append(("export", step))


def test_one_step_runs_the_stages_in_order():
    run = FakeRun(max_staleness=1, flat={"q0/p0"})
    train_loop(run, 0, 2)
    order = [c[0] for c in run.calls]
    assert order == ["extra_rows", "learner_step", "learner_step", "sync_weights", "record_step"] * 2 + ["checkpoint"]
    assert [c[1:] for c in run.calls if c[0] == "extra_rows"] == [(0, 4, 2), (1, 4, 2)]  # 2 groups of G=2
    records = [c for c in run.calls if c[0] == "record_step"]
    first_trained = records[0][2]
    assert len(first_trained) == 2 and "q0/p0" not in first_trained  # the filter dropped it; a refill replaced it
    assert records[0][3] == ["q0/p0"]
    # 2 groups of G=2, one group per rank (2 sequences each), every rank dividing by the batch's 4 x 2 tokens
    assert [c[1:] for c in run.calls if c[0] == "learner_step"][:2] == [(0, 0, 2, 8), (1, 0, 2, 8)]
    assert run.version == 2 and [c for c in run.calls if c[0] == "sync_weights"] == [("sync_weights", 1),
                                                                                     ("sync_weights", 2)]


def test_export_every_exports_after_every_kth_step_after_its_checkpoint():
    run = FakeRun(max_staleness=0, flat=set())
    run.cfg.export_every, run.cfg.checkpoint_every = 2, 4
    train_loop(run, 0, 5)
    assert [c for c in run.calls if c[0] in ("checkpoint", "export")] == [
        ("export", 2), ("checkpoint", 4), ("export", 4), ("checkpoint", 5)]
    run = FakeRun(max_staleness=0, flat=set())  # export_every=0: only the end's export (Run.finish)
    train_loop(run, 0, 3)
    assert not [c for c in run.calls if c[0] == "export"]


def test_the_sync_check_follows_every_check_every_th_sync_with_the_steps_sequences(monkeypatch):
    import driver.step

    run = FakeRun(max_staleness=0, flat=set())
    run.cfg.weight_sync.check_every = 2

    def check_sync(fleet, sequences):
        run.calls.append(("check_sync", fleet.version, len(sequences)))
        return {"sync/logprob_max_abs_diff": 0.0}
    monkeypatch.setattr(driver.step, "check_sync", check_sync)
    train_loop(run, 0, 4)
    assert [c for c in run.calls if c[0] == "check_sync"] == [("check_sync", 2, 4), ("check_sync", 4, 4)]
    order = [c[0] for c in run.calls if c[0] in ("sync_weights", "check_sync")]
    assert order == ["sync_weights", "sync_weights", "check_sync"] * 2


def test_a_failed_sync_waits_for_the_rollouts_and_is_retried_then_fails_the_run():
    from driver.failure import RunFailed
    from driver.step import sync_weights

    run = FakeRun(max_staleness=0, flat=set())
    fleet, failures = run.fleet, [RuntimeError("engine 0 died")]

    def flaky(version):
        if failures:
            raise failures.pop()
        run.calls.append(("sync_weights", version))
        return {"seconds": 0.0}
    fleet.broadcaster.sync = flaky
    fleet.wait_for_rollouts = lambda: run.calls.append(("wait_for_rollouts",))
    assert sync_weights(fleet, 1) == {"seconds": 0.0}
    assert run.calls == [("wait_for_rollouts",), ("sync_weights", 1)] and fleet.version == 1
    assert fleet.sync_retries == 1
    failures[:] = [RuntimeError("still dead")] * 3
    with pytest.raises(RunFailed, match="weight sync to version 2 failed: still dead"):
        sync_weights(fleet, 2)
    assert fleet.version == 1


def test_a_step_with_no_usable_group_skips_the_update():
    run = FakeRun(max_staleness=0, flat={f"q{i}/p0" for i in range(40)})
    run.cfg.algorithm.max_num_gen_batches = 1
    train_loop(run, 0, 1)
    assert [c[0] for c in run.calls] == ["record_step", "checkpoint"]
    assert run.calls[0][2] == [] and not run.calls[0][4] and run.version == 0


def test_checkpoint_every_0_checkpoints_only_after_the_last_step():
    run = FakeRun(max_staleness=0, flat=set())
    run.cfg.checkpoint_every = 0
    train_loop(run, 0, 3)
    assert [c for c in run.calls if c[0] == "checkpoint"] == [("checkpoint", 3)]
    run = FakeRun(max_staleness=0, flat=set())
    run.cfg.checkpoint_every = 2
    train_loop(run, 0, 3)
    assert [c for c in run.calls if c[0] == "checkpoint"] == [("checkpoint", 2), ("checkpoint", 3)]
