"""Candidate labels from real verifiers: math-verify for math answers, the sandbox for code.

math-verify enforces its timeouts with `signal.alarm`, which only works in a process's main thread
(REFERENCE.md, "Known failure modes"). So `verify_math_answer` is called either here, in the main thread,
or in the worker processes of `label_math` (a process pool whose tasks run in each worker's main
thread, with a per-item deadline on top). Plain integers on both sides take an exact fast path inside the
same function, so the procedural source goes through the same code as everything else at no cost.

A verifier error or timeout is never a silent zero: it is counted (`LabelStats.errors`) and ends in the
manifest; the candidate is labeled wrong (0.0) because its answer could not be shown equal.
"""
from __future__ import annotations

import multiprocessing as mp
import re
from dataclasses import dataclass, field

_INT_RE = re.compile(r"^[+-]?\d+$")
_BOXED_RE = re.compile(r"\\boxed\{")
_ANSWER_LINE_RE = re.compile(r"(?im)^\s*(?:final\s+)?answer\s*(?:is)?\s*[:=]?\s*(.+?)\s*$")


def verify_math_answer(candidate: str, reference: str) -> bool:
    """True when the candidate answer equals the reference (math-verify; exact for two plain integers).

    Call it in a process's main thread (math-verify's timeouts use signal.alarm).
    """
    candidate, reference = str(candidate).strip(), str(reference).strip()
    if _INT_RE.match(candidate) and _INT_RE.match(reference):
        return int(candidate) == int(reference)
    from math_verify import parse, verify

    gold = parse(_as_math(reference))
    pred = parse(_as_math(candidate))
    return bool(gold) and bool(pred) and bool(verify(gold, pred))


def _as_math(text: str) -> str:
    """Wrap a bare answer in `$...$` so math-verify reads it as LaTeX when it is not already marked up."""
    return text if ("$" in text or "\\boxed" in text or "\\(" in text) else f"${text}$"


def extract_answer(text: str) -> str:
    """The final answer of a worked solution: the last `\\boxed{...}`, else the last `Answer: ...` line,
    else the whole text (math-verify then looks for the last expression itself)."""
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed
    lines = _ANSWER_LINE_RE.findall(text)
    return lines[-1].strip().rstrip(".") if lines else text.strip()


def _last_boxed(text: str):
    starts = [m.end() for m in _BOXED_RE.finditer(text)]
    if not starts:
        return None
    depth, i = 1, starts[-1]
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


@dataclass
class LabelStats:
    """What labeling cost and what went wrong (written into the manifest)."""
    checked: int = 0
    unique_pairs: int = 0
    errors: int = 0
    timeouts: int = 0
    messages: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"checked": self.checked, "unique_pairs": self.unique_pairs, "errors": self.errors,
                "timeouts": self.timeouts, "examples": self.messages[:10]}


def _verify_task(pair):
    try:
        return verify_math_answer(*pair), ""
    except Exception as e:  # noqa: BLE001 - reported and counted by the caller
        return False, f"{type(e).__name__}: {e}"


def label_math(pairs: list, processes: int = 1, timeout_s: float = 10.0, stats: LabelStats | None = None) -> list:
    """Labels (1.0 / 0.0) for (candidate_answer, reference) pairs.

    Identical pairs are checked once. Pairs of plain integers are checked here (exact); the rest in a
    spawned process pool, each with a deadline of `timeout_s`; errors and timeouts are counted in `stats`.
    """
    stats = stats if stats is not None else LabelStats()
    unique = sorted(set((str(c), str(r)) for c, r in pairs))
    stats.checked += len(pairs)
    stats.unique_pairs += len(unique)
    result = {}
    slow = []
    for pair in unique:
        if _INT_RE.match(pair[0].strip()) and _INT_RE.match(pair[1].strip()):
            result[pair] = verify_math_answer(*pair)
        else:
            slow.append(pair)
    if slow:
        result.update(_pool_verify(slow, processes, timeout_s, stats))
    return [1.0 if result[(str(c), str(r))] else 0.0 for c, r in pairs]


def _pool_verify(pairs: list, processes: int, timeout_s: float, stats: LabelStats) -> dict:
    ctx = mp.get_context("spawn")
    out = {}
    with ctx.Pool(max(1, processes)) as pool:
        futures = [(pair, pool.apply_async(_verify_task, (pair,))) for pair in pairs]
        for pair, fut in futures:
            try:
                ok, error = fut.get(timeout=timeout_s)
            except mp.TimeoutError:
                ok, error = False, "timeout"
                stats.timeouts += 1
            if error:
                stats.errors += 1
                stats.messages.append(f"{pair!r}: {error}")
            out[pair] = ok
        pool.terminate()
    return out


def label_code(items: list, sandbox_cfg=None, timeout_s: float = 30.0, stats: LabelStats | None = None) -> list:
    """Unit-test pass fractions for `items` = [(solution, tests, entry_point), ...], run in the sandbox.

    Uses `sandbox.pool.SandboxPool` (imported lazily: the sandbox is its own package). A run the sandbox
    itself failed (`sandbox_error`) or that gave no result in time is retried once; if it fails again it is
    counted as an error and scores its pass fraction (0.0 when no test ran).
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
    for task, res in zip(tasks, results):
        if res is None:
            stats.timeouts += 1
            stats.errors += 1
            stats.messages.append(f"task {task.task_id}: no result within {timeout_s}s")
            fractions.append(0.0)
            continue
        if res.status not in ("completed", "solution_error", "timeout", "memory_limit", "crashed", "output_limit"):
            stats.errors += 1
            stats.messages.append(f"task {task.task_id}: {res.status} {res.error or ''}".strip())
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
