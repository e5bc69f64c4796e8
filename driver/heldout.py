"""The held-out readings of a selector run (`Run.evaluate`): GenSelect@N of the policy on rollout actor 0, greedy,
on the held-out prompts read whole (plus sampled responses), by a knockout tournament and by a round robin of pairs
when configured, next to majority@N, random@N, pass@N and the rule selectors (driver/baselines.py) with 95% bootstrap
CIs over problems (driver/evaluate.py holds the procedures and the metrics); on the validation set at every reading,
on the test set and the no-cue set at the start and the end (the sets: driver/eval_sets.py). Each set's record also
keeps every selector's per-prompt scores with their problem ids (`scores`, driver.eval_metrics.prompt_scores), from
which driver/report.py and driver/compare.py compute paired CIs.
"""
from __future__ import annotations

import logging
import time
from typing import Optional

from driver.data.dataset import prompt_style
from driver.failure import RunFailed

log = logging.getLogger("genselect.heldout")


def on_schedule(step: int, steps: int, every: int) -> bool:
    """Whether `step` is the last one or a multiple of `every` (0: the last only)."""
    return step == steps or (every > 0 and step % every == 0)


def nocue_due(step: int, steps: int, every: int, at_start: bool = True) -> bool:
    """Whether the evaluation at `step` also reads the no-cue held-out set: at the start (unless not `at_start`),
    at the end, and at multiples of `every` (0: start and end only)."""
    return at_start if step == 0 else on_schedule(step, steps, every)


#: the sets of a reading: (prefix of their keys in a result, their name in the console)
READ_SETS = (("", ""), ("test/", "test set"), ("nocue/", "no-cue set"), ("ood/", "out-of-distribution set"))


def eval_lines(result: dict, cfg, step: int) -> list:
    """The console lines of one held-out reading (`HeldOutReader.read`): for each set read (validation, test, no
    cue), the whole prompts, the own-answer breakdown of a solve-then-point selector, the rule selectors, the
    knockout and the round robin, as far as they were read."""
    lines = []
    for prefix, name in READ_SETS:
        values = {k[len(prefix):]: v for k, v in result.items() if k.startswith(prefix)} if prefix else result
        if "genselect" in values:
            lines += set_lines(values, cfg, f"eval step {step}" + (f", {name}" if name else ""))
    return lines


def set_lines(result: dict, cfg, tag: str) -> list:
    """The console lines of one set's reading (`HeldOutReader._evaluate_on`'s keys), each starting `[tag...]`."""
    def by_n(sizes: dict) -> str:
        return "  by N " + " ".join(f"{n}:{v['genselect'] if isinstance(v, dict) else v:.2f}"
                                    for n, v in sizes.items()) if sizes else ""

    def ci(key: str) -> str:
        return f"{result[key]:.3f} [{result[key + '_lo']:.3f}, {result[key + '_hi']:.3f}]"

    sampled = f"  sampled {result['sampled']:.3f}" if result.get("sampled") is not None else ""
    rate = result.get("unforced_judgment_rate")  # a forced_judgment response form: the model's own share
    unforced = f"  unforced judgments {rate:.3f}" if rate is not None else ""
    lines = [f"[{tag}] GenSelect@N {ci('genselect')}{sampled}  majority@N {result['majority']:.3f}  random@N "
             f"{result['random']:.3f}  pass@N {result['pass_at_n']:.3f}  parse failures "
             f"{result['parse_failure_rate']:.3f}{unforced}{by_n(result.get('by_size'))}"]
    if "own_answer/solved" in result:  # a solve-then-point selector: its solving apart from its pointing
        lines.append(f"[{tag}, own answer] solved {result['own_answer/solved']:.3f}  stated "
                     f"by a candidate {result['own_answer/stated']:.3f}  index follows it "
                     f"{result['own_answer/follows']:.3f}  accuracy if it always did "
                     f"{result['own_answer/follow_ceiling']:.3f}  accuracy where none states it "
                     f"{result['own_answer/unstated_accuracy']:.3f}")
    lines += rule_lines(result, tag)
    for name, label in (("knockout", f"knockout of {cfg.eval_knockout_window}"
                                      + (", both orders" if cfg.eval_knockout_both_orders else "")),
                        ("round_robin", f"round robin of pairs by {cfg.eval_round_robin}")):
        if f"{name}/genselect" in result:
            over = (f"  ({result[f'{name}/over_majority']:+.3f} [{result[f'{name}/over_majority_lo']:+.3f}, "
                    f"{result[f'{name}/over_majority_hi']:+.3f}] over majority@N)"
                    if f"{name}/over_majority" in result else "")
            lines.append(f"[{tag}, {label}] GenSelect@N {ci(f'{name}/genselect')}{over}"
                         f"{by_n(result.get(f'{name}/by_size'))}")
    return lines


def rule_lines(result: dict, tag: str) -> list:
    """One console line per rule selector read beside the policy (driver/baselines.py): whole prompt and knockout,
    each starting `[tag, <rule>]`; the solve-alone rule's also says what its solving read and how long it took."""
    from driver.baselines import RULE_NAMES, RULES

    lines = []
    for rule in RULES:
        key = f"rule/{rule}/"
        if key + "genselect" not in result:
            continue
        line = (f"[{tag}, {RULE_NAMES[rule]}] whole prompt {result[key + 'genselect']:.3f} "
                f"[{result[key + 'genselect_lo']:.3f}, {result[key + 'genselect_hi']:.3f}]")
        if key + "knockout/genselect" in result:
            line += (f"  knockout {result[key + 'knockout/genselect']:.3f} [{result[key + 'knockout/genselect_lo']:.3f}, "
                     f"{result[key + 'knockout/genselect_hi']:.3f}]")
        if key + "solve_s" in result:
            line += (f"  (solutions: answered {result[key + 'answered']:.3f}, stated by a candidate "
                     f"{result[key + 'stated']:.3f}, right {result[key + 'solved']:.3f}; solving took "
                     f"{result[key + 'solve_s']:.1f} s)")
        lines.append(line)
    return lines


def solve_budget(cfg) -> int:
    """Tokens the solve-alone rule's solution of a problem may take: `rollout.max_response_tokens`, the policy's own
    response budget (a solve-then-point selector writes its worked solution within it; a reasoning selector judges
    within it), so the rule gets no more tokens to solve than the policy gets to select."""
    return cfg.rollout.max_response_tokens


class HeldOutReader:
    """Reads the policy on the held-out sets through rollout actor 0 of `fleet` (driver.fleet.Fleet); `warn(message)`
    shows a warning to the user (a reading retried after its deadline)."""

    def __init__(self, cfg, fleet, eval_tasks: list, nocue_tasks: list, warn, test_tasks: list = (),
                 ood_tasks: list = ()):
        self.cfg, self.fleet, self.eval_tasks, self.nocue_tasks, self.warn = cfg, fleet, eval_tasks, nocue_tasks, warn
        self.test_tasks, self.ood_tasks = list(test_tasks), list(ood_tasks)
        self._solutions: dict = {}  # problem id -> the policy's solve-alone solution, within one reading
        self._unsolvable: Optional[str] = None  # why the model cannot be asked to solve alone, once it could not

    def read(self, step: int) -> dict:
        """Held-out accuracy (greedy and sampled, by N and by slip kind) on the validation set; at the start and the
        end also on the test set (`test/` keys) and the out-of-distribution set (`ood/` keys); at the start
        (`eval_without_cue_at_start`), the end and every `eval_without_cue_every` steps also on the no-cue set (`nocue/` keys), when the training data has a cue."""
        self._solutions = {}  # the policy's solutions of this reading (the no-cue set shares the test set's problems)
        result = self._evaluate_on(self.eval_tasks, self.cfg.eval_samples, step)
        if self.test_tasks and (step == 0 or on_schedule(step, self.cfg.steps, 0)):
            test = self._evaluate_on(self.test_tasks, 0, step)  # greedy only: the sampled reading is validation's
            result.update({f"test/{k}": v for k, v in test.items() if k != "by_slip_kind"})
        if self.ood_tasks and (step == 0 or on_schedule(step, self.cfg.steps, 0)):
            ood = self._evaluate_on(self.ood_tasks, 0, step)
            result.update({f"ood/{k}": v for k, v in ood.items() if k != "by_slip_kind"})
        if self.nocue_tasks and nocue_due(step, self.cfg.steps, self.cfg.eval_without_cue_every,
                                          self.cfg.eval_without_cue_at_start):
            nocue = self._evaluate_on(self.nocue_tasks, 0, step)
            result.update({f"nocue/{k}": v for k, v in nocue.items() if k != "by_slip_kind"})
        return result

    def _evaluate_on(self, tasks: list, samples: int, step: int) -> dict:
        """One held-out set's reading: the whole prompts (greedy, and `samples` sampled responses each), the rule
        selectors, then the knockout and the round robin when configured, one after the other (run at once they took
        as long: the engine is busy either way). `eval_s`: its wall time; `scores`: every selector's per-prompt
        scores (driver.eval_metrics.prompt_scores)."""
        from driver.eval_metrics import by_size, by_slip_kind, prompt_scores, selection_metrics

        started = time.time()
        choices, sampled, own_answer, answers = self._choose_whole_prompts(tasks, samples, step)
        result = selection_metrics(tasks, choices, seed=self.cfg.seed)
        result.update({"sampled": sampled, "by_size": by_size(tasks, choices)})
        if "unforced_judgment_rate" in own_answer:
            result["unforced_judgment_rate"] = own_answer.pop("unforced_judgment_rate")
        result.update({f"own_answer/{k}": v for k, v in own_answer.items()})
        selections = {"genselect": choices}
        if all(t.domain == "math" for t in tasks):  # the rules compare final answers (and read a hedge cue if any)
            selections.update(self._rule_selections(tasks, answers, step, result))
        if self.cfg.eval_knockout_window:
            selections["knockout/genselect"] = self._knockout_choices(tasks, step)
            result.update(self._procedure_metrics("knockout", tasks, selections["knockout/genselect"],
                                                  ("parse_failure_rate", "over_majority", "over_majority_lo",
                                                   "over_majority_hi")))
        if self.cfg.eval_round_robin != "none":
            selections["round_robin/genselect"] = self._round_robin_choices(tasks, step)
            result.update(self._procedure_metrics("round_robin", tasks, selections["round_robin/genselect"],
                                                  ("over_majority", "over_majority_lo", "over_majority_hi")))
        result["scores"] = prompt_scores(tasks, selections)
        result["eval_s"] = time.time() - started
        if self.cfg.data.source == "procedural_math":  # its mistakes can be read back from the text
            result["by_slip_kind"] = by_slip_kind(tasks, choices)
        return result

    def _rule_selections(self, tasks: list, answers: list, step: int, result: dict) -> dict:
        """The rule selectors' choices on `tasks` ({`rule/{rule}/[knockout/]genselect`: P choices},
        driver.baselines.rule_choices); their accuracies with CIs, and what the solve-alone rule's solving read and
        how long it took (`rule/solve_alone/{answered,stated,solved,solve_s}`), go into `result`."""
        from driver.baselines import (choice_metrics, rule_choices, rule_stating, solve_alone_breakdown,
                                      solve_alone_stating)

        solutions, seconds = self._solve_alone(tasks, step)
        stating = solve_alone_stating(tasks, solutions)
        choices = rule_choices(tasks, rule_stating(tasks, answers, stating), self.cfg.eval_knockout_window,
                               self.cfg.seed)
        result.update(choice_metrics(tasks, choices, self.cfg.seed))
        result.update({f"rule/solve_alone/{k}": v for k, v in solve_alone_breakdown(tasks, solutions, stating).items()})
        result["rule/solve_alone/solve_s"] = seconds
        return choices

    def _solve_alone(self, tasks: list, step: int) -> tuple:
        """(P solution texts, None where there is none; seconds spent solving): the policy's greedy solution of each
        task's problem without its candidates (driver.evaluate.solve_remote, `solve_budget` tokens), one request per
        distinct problem not yet solved in this reading. A model that cannot be asked (its chat template does not
        take a generator prompt: `_ask_to_solve`) has no solutions from then on, and the rule reads as the cue rule."""
        todo = list({t.problem_id: (t.problem_id, t.problem, t.domain) for t in tasks
                     if t.problem_id not in self._solutions}.values())
        started, seconds = time.time(), 0.0
        if todo:
            texts = self._ask_to_solve(todo, step) if self._unsolvable is None else [None] * len(todo)
            self._solutions.update({pid: text for (pid, _, _), text in zip(todo, texts)})
            seconds = time.time() - started
            log.info("solve-alone rule: %d problems solved at step %d in %.1f s", len(todo), step, seconds)
        return [self._solutions[t.problem_id] for t in tasks], seconds

    def _ask_to_solve(self, problems: list, step: int) -> list:
        """Q solution texts of `problems` ((problem_id, text, domain) each) from rollout actor 0; a timeout or an
        engine death is handled as every reading's (`_read_on_engine`), any other error (the model's chat template
        cannot render the generator prompt) warns once and gives Q Nones."""
        from ray.exceptions import RayActorError

        from core.deadlines import generate_deadline_s
        from driver.evaluate import is_timeout, solve_remote

        budget = solve_budget(self.cfg)
        # later than the rollout actor's own deadline for the call, which counts the actual (shorter) prompts
        deadline = generate_deadline_s(self.cfg.rollout, self.cfg.data.max_prompt_tokens, len(problems), budget)

        def solve():
            try:
                return solve_remote(self.fleet.handles.rollouts[0], problems, budget, deadline)
            except Exception as err:  # noqa: BLE001 -- only the model's own refusal is kept from the run's handling
                if is_timeout(err) or isinstance(err, RayActorError):
                    raise
                return err

        out = self._read_on_engine(solve, f"solve-alone solving at step {step}")
        if not isinstance(out, Exception):
            return out
        text = str(out).strip()
        self._unsolvable = f"{type(out).__name__}: {text.splitlines()[-1][:200] if text else ''}"
        self.warn(f"solve-alone rule: the model could not be asked to solve a problem alone ({self._unsolvable}); "
                  f"the rule reads as the hedge-cue rule")
        return [None] * len(problems)

    def _read_on_engine(self, call, what: str):
        """`call()` (an evaluation procedure on rollout actor 0), again after its deadline while it times out
        (`retry_on_timeout`) and once after the engine died and Ray restarted it (given the current weights:
        Fleet.restore_worker); any other error, or a second death, is a RunFailed naming `what`."""
        from driver.evaluate import retry_on_timeout

        from ray.exceptions import RayActorError

        for attempt in (1, 2):
            try:
                return retry_on_timeout(call, what, self.warn)
            except RayActorError as err:  # the engine died (or its node): once Ray restarted it, read again
                if attempt == 2:
                    raise RunFailed(f"{what} failed ({type(err).__name__}: {err})") from err
                log.warning("%s: rollout actor 0 failed (%s); waiting for its restart", what, type(err).__name__)
                self.fleet.restore_worker(0)
            except Exception as err:
                raise RunFailed(f"{what} failed ({type(err).__name__}: {err})") from err

    def _choose_whole_prompts(self, tasks: list, samples: int, step: int) -> tuple:
        """(greedy choices, sampled accuracy or None, own-answer breakdown, own answers) of `tasks` read whole by rollout
        actor 0
        (`driver.evaluate.choose_remote`)."""
        from core.deadlines import generate_deadline_s
        from driver.evaluate import choose_remote

        deadline = generate_deadline_s(self.cfg.rollout, self.cfg.data.max_prompt_tokens, len(tasks) * max(1, samples))
        return self._read_on_engine(lambda: choose_remote(self.fleet.handles.rollouts[0], tasks, deadline, samples),
                                    f"evaluation at step {step}")

    def _knockout_choices(self, tasks: list, step: int) -> list:
        """The same tasks selected by a knockout tournament (driver.evaluate.choose_knockout): P choices."""
        from core.algo.knockout import rounds_needed
        from core.deadlines import generate_deadline_s
        from driver.evaluate import choose_knockout_remote

        # each round is one generate call of at most N / 2 sub-prompts per task (twice that read in both orders),
        # each shorter than the task's prompt
        cfg = self.cfg
        window, n, both = cfg.eval_knockout_window, cfg.data.max_candidates, cfg.eval_knockout_both_orders
        deadline = rounds_needed(n, window) * generate_deadline_s(
            self.cfg.rollout, self.cfg.data.max_prompt_tokens, len(tasks) * max(1, n // 2) * (2 if both else 1))
        return self._read_on_engine(
            lambda: choose_knockout_remote(self.fleet.handles.rollouts[0], tasks, window, prompt_style(self.cfg),
                                           deadline, both_orders=both),
            f"knockout evaluation at step {step}")

    def _round_robin_choices(self, tasks: list, step: int) -> list:
        """The same tasks selected by a round robin of pairs read in both orders (driver.evaluate.choose_round_robin;
        wins pooled by final answer with eval_round_robin=answer): P choices."""
        from core.deadlines import generate_deadline_s
        from driver.evaluate import choose_round_robin_remote

        n = self.cfg.data.max_candidates  # one batch of at most N (N - 1) pair prompts per task
        deadline = generate_deadline_s(self.cfg.rollout, self.cfg.data.max_prompt_tokens, len(tasks) * n * (n - 1))
        return self._read_on_engine(
            lambda: choose_round_robin_remote(self.fleet.handles.rollouts[0], tasks, prompt_style(self.cfg),
                                              deadline, by_answer=self.cfg.eval_round_robin == "answer"),
            f"round-robin evaluation at step {step}")

    def _procedure_metrics(self, prefix: str, tasks: list, choices: list, extra: tuple) -> dict:
        """`{prefix}/genselect` with its CI, the `extra` metrics and `{prefix}/by_size` of one selection procedure."""
        from driver.eval_metrics import by_size, selection_metrics

        metrics = selection_metrics(tasks, choices, seed=self.cfg.seed)
        out = {f"{prefix}/{k}": metrics[k] for k in ("genselect", "genselect_lo", "genselect_hi") + extra}
        out[f"{prefix}/by_size"] = {n: r["genselect"] for n, r in by_size(tasks, choices).items()}
        return out
