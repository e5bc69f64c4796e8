"""Candidate labels from real verifiers: math answers through `sandbox.math_answer`, code through the sandbox.

Math: `sandbox.math_answer.check_answer` is the one implementation shared with the training-time verifier
(`actors.verifier.verifier_pool`); it reads prose, LaTeX and bare formulas the same way on both sides. Plain integers
are compared exactly here; every other pair runs in a `sandbox.workers.ProcessPool` worker with math-verify's own
`signal.alarm` timeouts off and the pool's killable wall deadline (`timeout_s`) on top, so an overrun is a
"timeout" verdict (the worker is killed and replaced), never math-verify's silent `False`.

A candidate whose verdict is a timeout or an error has no label (None): its answer was neither shown equal nor
shown different, so calling it wrong would be a label nobody can trust. Such candidates are counted per
verifier in `LabelStats` (manifest "labeling"), with examples, and left out of the problem's pool
(`driver.data.labeling`).
"""
from __future__ import annotations

import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

from sandbox.math_answer import ERROR, OK, TIMEOUT, Verdict, check_answer, extract_answer, warm_up

_INT_RE = re.compile(r"^[+-]?\d+$")
STATUSES = ("correct", "wrong", "timeout", "error")
MATH, CODE = "math-verify", "sandbox"


def verify_math_answer(candidate: str, reference: str) -> bool:
    """True when the candidate answer equals the reference; raises ValueError on a timeout or error verdict
    (never a silent False). In-process, without a deadline: for tests and small checks in the main thread."""
    verdict = check_answer(candidate, reference)
    if verdict.status != OK:
        raise ValueError(f"{verdict.status}: {verdict.detail}")
    return verdict.score == 1.0


@dataclass
class Tally:
    """Verdicts of one verifier: counts of correct / wrong / timeout / error and a few examples of each.

    Examples worth auditing come first: a verdict on two plain integers or identical strings (`plain`) is
    shown only when there are not enough others."""
    counts: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)
    plain: dict = field(default_factory=dict)
    keep: int = 3

    def add(self, status: str, example: str, plain: bool = False) -> None:
        self.counts[status] += 1
        shown = (self.plain if plain else self.examples).setdefault(status, [])
        if len(shown) < self.keep:
            shown.append(example)

    def to_dict(self) -> dict:
        shown = {s: (self.examples.get(s, []) + self.plain.get(s, []))[:self.keep] for s in STATUSES}
        return {**{s: self.counts[s] for s in STATUSES}, "examples": shown}


@dataclass
class LabelStats:
    """What labeling saw, per verifier (written into the manifest; `driver.synth --report` prints it)."""
    checked: int = 0
    unique_pairs: int = 0
    verifiers: dict = field(default_factory=dict)

    def record(self, verifier: str, status: str, example: str, plain: bool = False) -> None:
        self.verifiers.setdefault(verifier, Tally()).add(status, example, plain)

    def count(self, status: str) -> int:
        return sum(t.counts[status] for t in self.verifiers.values())

    @property
    def timeouts(self) -> int:
        return self.count("timeout")

    @property
    def errors(self) -> int:
        return self.count("error")

    def to_dict(self) -> dict:
        return {"checked": self.checked, "unique_pairs": self.unique_pairs,
                **{s: self.count(s) for s in STATUSES}, "timeouts": self.timeouts, "errors": self.errors,
                "verifiers": {name: t.to_dict() for name, t in sorted(self.verifiers.items())}}


def _status(verdict: Verdict, passed: bool) -> str:
    if verdict.status != OK:
        return TIMEOUT if verdict.status == TIMEOUT else ERROR
    return "correct" if passed else "wrong"


def _short(text: str, n: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 3] + "..."


def label_math(pairs: list, processes: int = 2, timeout_s: float = 10.0, stats: Optional[LabelStats] = None,
               names: Optional[list] = None) -> list:
    """Labels for (candidate_answer, reference) pairs: 1.0, 0.0, or None (timeout or error: unverified).

    Identical pairs are checked once; plain integers here, the rest in `processes` worker processes, each
    under the wall deadline `timeout_s`. Every verdict is counted in `stats` under "math-verify"; `names`
    (one per pair, e.g. "problem#candidate") label the examples.
    """
    stats = stats if stats is not None else LabelStats()
    keyed = [(str(c).strip(), str(r).strip()) for c, r in pairs]
    unique = sorted(set(keyed))
    stats.checked += len(pairs)
    stats.unique_pairs += len(unique)
    fast = [p for p in unique if _INT_RE.match(p[0]) and _INT_RE.match(p[1])]
    verdicts = {p: check_answer(*p) for p in fast}
    slow = [p for p in unique if p not in verdicts]
    if slow:
        verdicts.update(zip(slow, _pool_check(slow, processes, timeout_s)))
    labels = []
    for i, pair in enumerate(keyed):
        v = verdicts[pair]
        status = _status(v, v.score == 1.0)
        name = names[i] if names else f"pair {i}"
        stats.record(MATH, status, f"{name}: {_short(pair[0])!r} vs {_short(pair[1])!r}"
                                   + (f" ({_short(v.detail, 80)})" if v.detail else ""),
                     plain=v.detail in ("integers", "identical strings"))
        labels.append(None if status in (TIMEOUT, ERROR) else float(v.score == 1.0))
    return labels


def _pool_check(pairs: list, processes: int, timeout_s: float) -> list:
    """Verdicts for `pairs`, each checked in a worker process under a killable deadline of `timeout_s`."""
    from sandbox.workers import ProcessPool

    pool = ProcessPool(max(1, min(processes, len(pairs))), preload=["sandbox.math_answer", "math_verify"],
                       warmup=warm_up)
    try:
        def one(pair):
            out = pool.run(check_answer, (pair[0], pair[1], None), timeout_s)
            if out.status == OK:
                return out.value
            return Verdict(0.0, out.status, str(out.value))

        with ThreadPoolExecutor(max(1, processes)) as threads:
            return list(threads.map(one, pairs))
    finally:
        pool.close()


def label_code(items: list, sandbox_cfg=None, timeout_s: float = 30.0, stats: Optional[LabelStats] = None,
               names: Optional[list] = None) -> list:
    """Unit-test pass fractions for `items` = [(solution, tests, entry_point), ...], run in the sandbox;
    None for a candidate the sandbox could not judge (no result in time, or a sandbox failure).

    Uses `sandbox.pool.SandboxPool` (imported lazily). A sandbox failure or a missing result is retried once.
    What the solution itself does (fails, hangs, exhausts memory) is a verdict about it: "wrong" unless every
    test passed. Every verdict is counted in `stats` under "sandbox".
    """
    from sandbox.config import CodeTask, SandboxConfig
    from sandbox.pool import SandboxPool

    stats = stats if stats is not None else LabelStats()
    cfg = sandbox_cfg or SandboxConfig()
    tasks = [CodeTask(solution=s, tests=t, format="assert", entry_point=e, task_id=str(i))
             for i, (s, t, e) in enumerate(items)]
    stats.checked += len(tasks)
    stats.unique_pairs += len(tasks)
    with SandboxPool(cfg) as pool:
        results = _run_all(pool, tasks, timeout_s)
        retry = [i for i, r in enumerate(results) if r is None or r.status == "sandbox_error"]
        for i, res in zip(retry, _run_all(pool, [tasks[i] for i in retry], timeout_s)):  # not the code's fault
            results[i] = res
    fractions = []
    for i, res in enumerate(results):
        name = names[i] if names else f"task {i}"
        if res is None:
            stats.record(CODE, TIMEOUT, f"{name}: no result from the sandbox within {timeout_s}s")
            fractions.append(None)
        elif res.status in ("sandbox_error", "invalid_tests"):  # the sandbox or the tests failed, not the code
            stats.record(CODE, ERROR, f"{name}: {res.status} {_short(res.error or '', 80)}")
            fractions.append(None)
        else:
            passed = res.pass_fraction == 1.0
            stats.record(CODE, "correct" if passed else "wrong",
                         f"{name}: {res.status}, {res.pass_fraction:.2f} of the tests passed")
            fractions.append(float(res.pass_fraction))
    return fractions


def _run_all(pool, tasks: list, timeout_s: float) -> list:
    """Submit every task, then collect results with a deadline each (None on expiry)."""
    import concurrent.futures as cf

    futures = [pool.submit(t) for t in tasks]
    out = []
    for fut in futures:
        try:
            out.append(fut.result(timeout=timeout_s))
        except cf.TimeoutError:
            out.append(None)
    return out


__all__ = ["verify_math_answer", "extract_answer", "label_math", "label_code", "LabelStats", "Tally", "STATUSES"]
