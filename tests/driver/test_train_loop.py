"""driver.train.train_loop without Ray: a fake run whose engine is the test's, so the order of the stages and
what each stage hands the next can be checked exactly (collect -> filter -> shaping and advantages -> shard
-> learner step -> weight sync)."""
from types import SimpleNamespace

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


class FakeFleet:
    """What train_loop uses of driver.fleet.Fleet; stages 5 and 6 append to the run's `calls`."""

    def __init__(self, calls: list):
        self.version, self.num_learners, self.calls = 0, 2, calls

    def policy_logprobs(self, sequences):  # only an off-policy estimator calls it (not this test's grpo)
        raise AssertionError("policy_logprobs called by an on-policy estimator")

    def learner_step(self, batch, step):
        self.calls.append(("learner_step", step, [len(s) for s in batch.shards], batch.global_num_tokens))
        return {"learner/loss": 0.0, **batch.stats}, 0.1

    def sync_weights(self, version):
        self.calls.append(("sync_weights", version))
        self.version = version
        return {"seconds": 0.0}

    def check_sync(self, sequences):
        self.calls.append(("check_sync", self.version, len(sequences)))
        return {"sync/logprob_max_abs_diff": 0.0}


class FakeRun:
    """What train_loop uses of driver.run.Run; every stage call is appended to `calls`."""

    def __init__(self, max_staleness: int, flat: set):
        ids = [f"q{i}/p0" for i in range(40)]
        self.cfg = SimpleNamespace(max_staleness=max_staleness, prompts_per_step=2, checkpoint_every=100,
                                   algorithm=AlgorithmConfig(overlong_buffer_len=2),
                                   rollout=RolloutConfig(max_response_tokens=8), weight_sync=WeightSyncConfig())
        self.calls = []
        self.fleet = FakeFleet(self.calls)
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


def test_one_step_runs_the_stages_in_order():
    run = FakeRun(max_staleness=1, flat={"q0/p0"})
    train_loop(run, 0, 2)
    order = [c[0] for c in run.calls]
    assert order == ["extra_rows", "learner_step", "sync_weights", "record_step"] * 2 + ["checkpoint"]
    assert [c[1:] for c in run.calls if c[0] == "extra_rows"] == [(0, 4, 2), (1, 4, 2)]  # 2 groups of G=2
    run.calls = [c for c in run.calls if c[0] != "extra_rows"]
    first_trained = run.calls[2][2]
    assert len(first_trained) == 2 and "q0/p0" not in first_trained  # the filter dropped it; a refill replaced it
    assert run.calls[2][3] == ["q0/p0"]
    assert run.calls[0][2] == [2, 2] and run.calls[0][3] == 8  # 2 groups of G=2, one per rank; 4 x 2 tokens
    assert run.version == 2 and run.calls[1] == ("sync_weights", 1) and run.calls[4] == ("sync_weights", 2)


def test_the_sync_check_follows_every_check_every_th_sync_with_the_steps_sequences():
    run = FakeRun(max_staleness=0, flat=set())
    run.cfg.weight_sync.check_every = 2
    train_loop(run, 0, 4)
    assert [c for c in run.calls if c[0] == "check_sync"] == [("check_sync", 2, 4), ("check_sync", 4, 4)]
    order = [c[0] for c in run.calls if c[0] in ("sync_weights", "check_sync")]
    assert order == ["sync_weights", "sync_weights", "check_sync"] * 2


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
