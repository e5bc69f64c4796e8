"""The selection service under load (localhost only, bounded): throughput and latency of /v1/select next to the
same requests sent straight to one RolloutWorker actor, a mixed load with malformed requests, a weight swap
under load, a replica killed under load, and knockout accuracy for N = 8..64.

    python benchmarks/serve.py [--model PATH] [--requests 2000] [--problems 40] [--stages ...]
    # -> benchmarks/results/serve.json (and a markdown summary on stdout)

Model: the plain selector's warm-started model (driver.prepare on configs/selector.yaml, cached; the model whose
serving figures BENCHMARKS.md reports), or --model (e.g. runs/default/export). Candidates: procedural problems of the
default's generator drawn with a seed the training data never used (unseen problems, 64 candidates each); N = 8 for the
throughput runs.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REPS = 3
sys.path.insert(0, str(REPO))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))] if values else None


def problems_with_candidates(data_cfg, count: int, k: int = 64, seed: int = 90_001, exclude=frozenset(),
                             cue: bool = True) -> list:
    """[{problem, candidates (k), correct (k bools), answers}] of unseen procedural problems with >= 1 correct
    among the first 8 (the training data's generator settings, `data_cfg`; a seed the training data never used;
    problems whose text is in `exclude`, e.g. a training set's, are skipped). cue=False: no hedging sentences."""
    import dataclasses

    from driver.data import procedural
    from driver.data.sources import procedural_spec

    spec = procedural_spec(data_cfg)
    if not cue:
        spec = dataclasses.replace(spec, hedge_wrong_rate=0.0, hedge_correct_rate=0.0)
    rows = procedural.generate(count * 3, k, seed, spec)
    out = []
    for r in rows:
        answers = [c.rsplit("Answer:", 1)[1].strip() for c in r["candidates"]]
        correct = [a == r["answer"] for a in answers]
        if any(correct[:8]) and r["problem"] not in exclude:  # every N >= 8 then has a correct candidate
            out.append({"problem": r["problem"], "candidates": r["candidates"], "correct": correct,
                        "answers": answers})
        if len(out) == count:
            break
    return out


def training_problems(model: str, dataset: str = "") -> frozenset:
    """Problem texts of the training split of `dataset`, default: of the run that exported `model`
    (runs/X/summary.json 'dataset')."""
    try:
        from driver.data.dataset import load_dataset

        dataset = dataset or json.loads((Path(model).parent / "summary.json").read_text())["dataset"]
        return frozenset(t.problem for t in load_dataset(dataset, bad_rows="skip").train)
    except (OSError, KeyError, ValueError) as e:
        print(f"no training set to exclude: {e!r}", flush=True)
        return frozenset()


def load_summary(requests: int, concurrency: int, wall: float, latencies: list, statuses: list, results: list) -> dict:
    """What a load run reports: throughput, p50/p99 latency, the 200s, and each request's (status, payload,
    start, end)."""
    return {"requests": requests, "concurrency": concurrency, "seconds": wall, "rps": requests / wall,
            "p50_s": pct(latencies, 50), "p99_s": pct(latencies, 99),
            "ok": sum(s == 200 for s in statuses), "results": results}


def run_load(fn, bodies: list, concurrency: int) -> dict:
    """Send every body through fn(body) -> (status, payload) with `concurrency` threads."""
    latencies, statuses, results = [], [], [None] * len(bodies)

    def one(i):
        start = time.perf_counter()
        status, payload = fn(bodies[i])
        latencies.append(time.perf_counter() - start)
        statuses.append(status)
        results[i] = (status, payload, start, time.perf_counter())

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(len(bodies))))
    return load_summary(len(bodies), concurrency, time.perf_counter() - start, latencies, statuses, results)


def run_load_async(fn, bodies: list, concurrency: int) -> dict:
    """run_load with one asyncio loop and `concurrency` coroutines instead of threads: `fn(body)` is a coroutine
    function -> (status, payload). A client this light takes less of the 2 cores from the server it loads."""
    import asyncio

    latencies, statuses, results = [], [], [None] * len(bodies)

    async def worker(order):
        for i in order:
            start = time.perf_counter()
            status, payload = await fn(bodies[i])
            latencies.append(time.perf_counter() - start)
            statuses.append(status)
            results[i] = (status, payload, start, time.perf_counter())

    async def drive():
        order = iter(range(len(bodies)))
        await asyncio.gather(*(worker(order) for _ in range(concurrency)))
        if hasattr(fn, "aclose"):  # e.g. the HTTP client's session, bound to this run's loop
            await fn.aclose()

    start = time.perf_counter()
    asyncio.run(drive())
    return load_summary(len(bodies), concurrency, time.perf_counter() - start, latencies, statuses, results)


def http_post_async(url):
    """An aiohttp POST of one body. The session is opened on the first request of a run (run_load_async starts
    a loop per run) and closed at the run's end through `post.aclose`."""
    import aiohttp

    session = None

    async def post(body):
        nonlocal session
        if session is None:
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64),
                                            timeout=aiohttp.ClientTimeout(total=120))
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            async with session.post(url, data=data, headers={"content-type": "application/json"}) as r:
                return r.status, await r.json(content_type=None)
        except (aiohttp.ClientError, ValueError) as e:
            return -1, {"error": repr(e)}

    async def aclose():
        nonlocal session
        if session is not None:
            await session.close()
            session = None

    post.aclose = aclose
    return post


def http_post(url):
    import requests

    session = threading.local()

    def post(body):
        if not hasattr(session, "s"):
            session.s = requests.Session()
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            r = session.s.post(url, data=data, timeout=120)
        except requests.RequestException as e:
            return -1, {"error": repr(e)}
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, {"raw": r.text[:200]}
    return post


def malformed(rng: random.Random, good: dict):
    """(body, expected field) of one malformed request, drawn from a fixed menu."""
    menu = [
        (b"{not json", "body"), (b"[]", "body"),
        ({"candidates": good["candidates"]}, "problem"),
        ({**good, "candidates": good["candidates"][:1]}, "candidates"),
        ({**good, "candidates": [good["candidates"][0], ""]}, "candidates[1]"),
        ({**good, "candidates": [good["candidates"][0], 5]}, "candidates[1]"),
        ({**good, "samples": 0}, "samples"), ({**good, "samples": 1000}, "samples"),
        ({**good, "temperature": "warm"}, "temperature"), ({**good, "domain": "chemistry"}, "domain"),
        ({**good, "candidates": [good["candidates"][0], "x" * 10_000]}, "candidates[1]"),
    ]
    return menu[rng.randrange(len(menu))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--problems", type=int, default=40)
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/serve.json"))
    parser.add_argument("--stages", default="throughput,knockout,mixed,swap,death",
                        help="comma list of: throughput (with the direct baseline), knockout, mixed, swap, death")
    parser.add_argument("--knockout-problems", type=int, default=40)
    parser.add_argument("--training-dataset", default="",
                        help="dataset folder whose training problems the knockout skips (default: the run's)")
    parser.add_argument("--knockout-no-cue", action="store_true",
                        help="also knockout on candidates without the hedging cue (hedge rates 0)")
    parser.add_argument("--replicas", type=int, default=1, help="Serve replicas (fixed; 1 CPU reserved in all)")
    parser.add_argument("--window", type=int, default=0,
                        help="serve.window: candidates per selection prompt (0: the model's run decides, "
                             "driver.serve.served_window); the throughput rows send N = 8, one prompt at window 8")
    parser.add_argument("--access-log", action="store_true", help="keep Serve's per-request access log")
    parser.add_argument("--client", choices=("async", "threads"), default="async",
                        help="throughput load generator: one asyncio loop (aiohttp; awaited handle and actor calls) "
                             "or a thread per concurrent request (requests; blocking calls), as measured before")
    parser.add_argument("--throughput-optimized", action="store_true",
                        help="RAY_SERVE_THROUGHPUT_OPTIMIZED=1 (user code on the replica's main loop, buffered logs)")
    parser.add_argument("--ingress", choices=("haproxy", "proxy"), default="haproxy",
                        help="HTTP ingress: Ray Serve's HAProxy (the project's default, RAY_SERVE_ENABLE_HA_PROXY=1; "
                             "HTTP straight to the replicas' own servers) or Serve's Python proxy actor (=0)")
    args = parser.parse_args(argv)
    stages = set(args.stages.split(","))
    import os

    os.environ["RAY_SERVE_ENABLE_HA_PROXY"] = "1" if args.ingress == "haproxy" else "0"  # before apply_defaults

    from core.env import apply_defaults, default_env

    apply_defaults()
    import dataclasses

    import ray
    from ray import serve

    from core.config import load_config
    from driver.serve import start, stop

    cfg = load_config("selector")
    if args.model:
        model = str(Path(args.model).resolve())
    else:
        from driver.prepare import prepare

        model = str(Path(prepare(cfg.data, cfg.model, eval_prompts=50, tiny_cfg=cfg.tiny).model_dir).resolve())
    from driver.serve import run_config_of

    run_cfg = run_config_of(model)  # the training run's data and rollout settings, when the model has one
    problems = problems_with_candidates(cfg.data, args.problems)
    bodies8 = [{"problem": p["problem"], "candidates": p["candidates"][:8]} for p in problems]
    report = {"machine": {"platform": platform.platform(), "cpus": __import__("os").cpu_count(),
                          "python": platform.python_version()},
              "model": model, "run_config": run_cfg is not None, "problems": len(problems),
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}

    if args.throughput_optimized:
        os.environ["RAY_SERVE_THROUGHPUT_OPTIMIZED"] = "1"
    report["throughput_optimized"] = args.throughput_optimized
    report["ingress"] = args.ingress
    from driver.serve import resolve_settings

    window = resolve_settings(model, dataclasses.replace(cfg.serve, window=args.window), run_cfg or cfg).window
    if "throughput" in stages and window < 8:
        parser.error(f"the throughput rows compare one N = 8 prompt with one direct engine call, but this model "
                     f"is served with a window of {window}: pass --window 8")
    ray.init(address="local", include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": default_env()})
    serve_cfg = dataclasses.replace(cfg.serve, port=free_port(), num_cpus=1.0 / args.replicas,
                                    min_replicas=args.replicas,
                                    max_replicas=args.replicas,
                                    max_ongoing_requests=64, access_log=args.access_log, window=args.window)
    report["access_log"], report["replicas"] = args.access_log, args.replicas
    url = f"http://127.0.0.1:{serve_cfg.port}"
    t0 = time.perf_counter()
    handle, settings = start(model, serve_cfg, run_cfg or cfg, policy_version=0)
    report["serve_start_s"] = time.perf_counter() - t0
    report["window"] = settings.window
    post = http_post(url + "/v1/select")
    print(f"serve app up in {report['serve_start_s']:.0f} s at {url}", flush=True)

    # 1. throughput / latency at concurrency 1, 8, 32, N = 8, greedy (samples 1): over HTTP, through a
    # DeploymentHandle, and straight to one RolloutWorker actor (no Serve). Interleaved, REPS times each, so
    # that the load of a shared machine falls on all three alike; the medians are reported.
    load = run_load_async if args.client == "async" else run_load
    report["client"] = args.client

    async def handle_select(body):
        return 200, await handle.select.remote(body)

    paths = ({"serve": http_post_async(url + "/v1/select"), "serve_handle": handle_select} if args.client == "async"
             else {"serve": post, "serve_handle": lambda body: (200, handle.select.remote(body).result(timeout_s=120))})
    direct = None
    if "throughput" in stages:
        direct = DirectSelector(model, settings)
        paths["direct"] = direct.select_async if args.client == "async" else direct.select
        for fn in paths.values():
            load(fn, bodies8[:8], 4)  # warm-up
    runs = {name: {c: [] for c in (1, 8, 32)} for name in paths}
    for rep in range(REPS if "throughput" in stages else 0):
        for c in (1, 8, 32):
            reqs = (bodies8 * 8)[: 40 if c == 1 else 160]
            for name, fn in paths.items():
                r = load(fn, reqs, c)
                runs[name][c].append({k: v for k, v in r.items() if k != "results"})
                print(f"{name} c={c} rep {rep}: {r['rps']:.1f} req/s p50 {r['p50_s']*1e3:.0f} ms "
                      f"p99 {r['p99_s']*1e3:.0f} ms ok {r['ok']}/{r['requests']}", flush=True)
    for name in runs:
        report[name] = {c: {"rps": statistics.median(x["rps"] for x in v), "rps_all": [x["rps"] for x in v],
                            "p50_s": statistics.median(x["p50_s"] for x in v),
                            "p99_s": statistics.median(x["p99_s"] for x in v)} for c, v in runs[name].items() if v}
    if direct is not None:
        direct.close()
        for c in report["serve"]:
            report.setdefault("serve_vs_direct", {})[c] = report["serve"][c]["rps"] / report["direct"][c]["rps"]
            report.setdefault("handle_vs_direct", {})[c] = (report["serve_handle"][c]["rps"]
                                                            / report["direct"][c]["rps"])

    if "knockout" in stages:  # on the model as loaded (before the swap below changes the weights)
        data_cfg, exclude = (run_cfg or cfg).data, training_problems(model, args.training_dataset)
        report["knockout_problems"] = {"count": args.knockout_problems, "excluded_training_problems": len(exclude)}
        for cue in (True, False) if args.knockout_no_cue else (True,):
            ko = problems_with_candidates(data_cfg, args.knockout_problems, exclude=exclude, cue=cue)
            report["knockout" if cue else "knockout_no_cue"] = knockout(post, ko)
    rng = random.Random(0)
    if "mixed" in stages:
        report["mixed"] = mixed_load(post, bodies8, args.requests, rng)
    if "swap" in stages:
        report["swap"] = swap_under_load(post, bodies8, url, model, Path(tempfile.mkdtemp()) / "swap_model", rng)
    if "death" in stages:  # 4. a replica killed under load: Serve replaces it; count the failures meanwhile
        report["replica_death"] = kill_replica_under_load(post, bodies8, serve_cfg.app_name,
                                                          correct=[p["correct"][:8] for p in problems])
        print(f"replica death: {report['replica_death']}", flush=True)
    stop(serve_cfg)
    serve.shutdown()
    ray.shutdown()
    Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({k: report.get(k) for k in ("serve_vs_direct", "handle_vs_direct")}, indent=1))
    return 0


def mixed_load(post, bodies8, total, rng) -> dict:
    """`total` requests through 16 clients, every 20th malformed (5%): 0 5xx expected, every malformed one a
    4xx naming the field."""
    mixed, expected = [], []
    for i in range(total):
        good = bodies8[i % len(bodies8)]
        if i % 20 == 7:
            body, field = malformed(rng, good)
            mixed.append(body)
            expected.append(field)
        else:
            mixed.append(good)
            expected.append(None)
    r = run_load(post, mixed, 16)
    codes = [res[0] for res in r["results"]]
    bad_ok = sum(1 for (status, payload, _, _), field in zip(r["results"], expected)
                 if field is not None and 400 <= status < 500 and payload.get("error", {}).get("field") == field)
    out = {"requests": len(mixed), "malformed": sum(f is not None for f in expected),
           "malformed_4xx_naming_the_field": bad_ok,
           "good_200": sum(1 for c, f in zip(codes, expected) if f is None and c == 200),
           "5xx": sum(1 for c in codes if c >= 500), "connection_errors": codes.count(-1),
           "rps": r["rps"], "p50_s": r["p50_s"], "p99_s": r["p99_s"], "seconds": r["seconds"]}
    print(f"mixed: {out}", flush=True)
    return out


def swap_under_load(post, bodies8, url, model, new_dir, rng) -> dict:
    """8 clients load the app; POST /admin/reload to a perturbed copy of the model in the middle."""
    import requests

    write_perturbed(model, new_dir)
    stop_load, load_results = threading.Event(), []

    def loader():
        while not stop_load.is_set():
            s0 = time.perf_counter()
            status, payload = post(bodies8[rng.randrange(len(bodies8))])
            load_results.append((status, payload.get("policy_version"), s0, time.perf_counter()))

    threads = [threading.Thread(target=loader) for _ in range(8)]
    for t in threads:
        t.start()
    try:
        time.sleep(3)
        s0 = time.perf_counter()
        resp = requests.post(url + "/admin/reload", json={"model": str(new_dir)}, timeout=120)
        s1 = time.perf_counter()
        time.sleep(3)
    finally:
        stop_load.set()
        for t in threads:
            t.join()
    overlapping = [x for x in load_results if x[2] < s1 and x[3] > s0]
    out = {"status": resp.status_code, "admin_call_s": s1 - s0, "replica": resp.json().get("swap"),
           "requests_during_load": len(load_results), "in_flight_during_swap": len(overlapping),
           "failed": sum(1 for x in load_results if x[0] != 200),
           "versions_seen": sorted({x[1] for x in load_results if x[1] is not None})}
    print(f"swap: {out}", flush=True)
    return out


def knockout(post, problems, chunks: int = 3) -> dict:
    """Accuracy / latency of /v1/select (greedy, one sample, one client) for N = 8..64 next to majority@N and
    random@N on the same candidates (majority ties split evenly). Spread: the accuracies of `chunks` equal,
    disjoint parts of the problems."""
    out = {}
    size = len(problems) // chunks
    for n in (8, 16, 32, 64):
        acc, lat, maj, rnd, rounds, unparsed = [], [], [], [], [], 0
        for p in problems:
            cands, correct, answers = p["candidates"][:n], p["correct"][:n], p["answers"][:n]
            s0 = time.perf_counter()
            status, res = post({"problem": p["problem"], "candidates": cands})
            lat.append(time.perf_counter() - s0)
            idx = res.get("index") if status == 200 else None
            unparsed += res.get("unparsed", 0) if status == 200 else 1
            acc.append(bool(idx is not None and correct[idx]))
            rounds.append(res.get("rounds", 0))
            counts = {}
            for a in answers:
                counts[a] = counts.get(a, 0) + 1
            best = max(counts.values())
            top = [a for a in counts if counts[a] == best]
            right = answers[correct.index(True)]
            maj.append(sum(a == right for a in top) / len(top))
            rnd.append(sum(correct) / n)
        out[n] = {"accuracy": statistics.mean(acc), "majority": statistics.mean(maj),
                  "random": statistics.mean(rnd), "p50_s": pct(lat, 50), "p99_s": pct(lat, 99),
                  "rounds": statistics.mean(rounds), "unparsed_final": unparsed, "problems": len(problems),
                  "chunks": {name: [statistics.mean(v[i * size:(i + 1) * size]) for i in range(chunks)]
                             for name, v in (("accuracy", acc), ("majority", maj), ("random", rnd))}}
        print(f"knockout N={n}: {out[n]}", flush=True)
    return out


def write_perturbed(model: str, out: Path) -> None:
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.01)
    if out.exists():
        shutil.rmtree(out)
    m.save_pretrained(out)
    for f in Path(model).iterdir():
        if f.name.startswith("tokenizer") or f.name == "genselect_model.json":
            shutil.copy(f, out / f.name)


def kill_replica_under_load(post, bodies, app_name: str, clients: int = 4, correct=None,
                            timeout_s: float = 300.0) -> dict:
    """`clients` threads load the app with `bodies`; one replica's actor is killed (`ray.kill`, no restart: a
    dead process, as an OOM kill would leave); Serve starts a replacement. Reports the requests sent and failed
    (by status), those sent while the deployment ran short of a replica, the seconds until Serve runs as many
    replicas as before again (one of them new), and the answers after recovery: every body sent once more, its
    index compared with its answer before the kill (and with `correct[i][index]`, per-candidate bools, if
    given)."""
    import ray
    from ray import serve

    from driver.serve import DEPLOYMENT

    def running() -> int:
        return serve.status().applications[app_name].deployments[DEPLOYMENT].replica_states.get("RUNNING", 0)

    def replicas() -> set:
        return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                if a["namespace"] == "serve" and f"#{DEPLOYMENT}#" in a["name"]}

    def answers() -> list:
        return [post(b) for b in bodies]

    before = answers()
    count, names = running(), replicas()
    results, stop_load = [], threading.Event()

    def loader(seed):
        rng = random.Random(seed)
        while not stop_load.is_set():
            s0 = time.perf_counter()
            status, _ = post(bodies[rng.randrange(len(bodies))])
            results.append((status, s0, time.perf_counter()))

    threads = [threading.Thread(target=loader, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    replaced = None
    try:
        time.sleep(3)
        victim = sorted(names)[0]
        killed = time.perf_counter()
        ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
        while time.perf_counter() - killed < timeout_s:
            if running() >= count and replicas() - names:
                replaced = time.perf_counter()
                break
            time.sleep(0.5)
        time.sleep(3)
    finally:
        stop_load.set()
        for t in threads:
            t.join()
    after = answers()
    end = replaced or time.perf_counter()
    down = [r for r in results if killed <= r[1] < end]
    failed: dict = {}
    for r in results:
        if r[0] != 200:
            failed[r[0]] = failed.get(r[0], 0) + 1
    ok_after = [i for i, (status, _) in enumerate(after) if status == 200]
    out = {"replicas": count, "clients": clients, "killed": victim, "sent": len(results),
           "failed": sum(failed.values()), "failed_by_status": failed,
           "sent_while_short": len(down), "failed_while_short": sum(1 for r in down if r[0] != 200),
           "replacement_running_s": (replaced - killed) if replaced else None,
           "after": {"requests": len(after), "ok": len(ok_after),
                     "same_index_as_before": sum(1 for i in ok_after if before[i][0] == 200
                                                 and after[i][1].get("index") == before[i][1].get("index")),
                     "policy_versions": sorted({after[i][1].get("policy_version") for i in ok_after})}}
    if correct is not None:
        def acc(rows):
            return sum(1 for i, (status, res) in enumerate(rows) if status == 200 and res.get("index") is not None
                       and correct[i][res["index"]]) / len(rows)
        out["accuracy_before"], out["after"]["accuracy"] = acc(before), acc(after)
    return out


class DirectSelector:
    """The same N = 8 selections through one RolloutWorker Ray actor, no Serve and no HTTP: the prompt built and
    the judgment parsed by the client, one `generate` call per request (what a replica does per request)."""

    def __init__(self, model, settings):
        import ray

        from actors.rollout.rollout_worker import RolloutWorker

        self.settings = settings
        self.actor = ray.remote(num_cpus=0, max_concurrency=256)(RolloutWorker).remote(
            settings.rollout, model, dtype=settings.dtype, seed=settings.seed)
        ray.get(self.actor.health.remote(), timeout=600)

    def _call(self, body):
        from core.algo.genselect import build_prompt
        from core.records import SelectionTask

        cands = body["candidates"]
        task = SelectionTask(prompt_id="d", problem_id="d", domain="math", problem=body["problem"],
                             candidates=tuple(cands), candidate_answers=tuple(cands), labels=(0.0,) * len(cands),
                             reference="", prompt=build_prompt(body["problem"], cands))
        return self.actor.generate.remote([task], n=1, temperature=0.0, max_tokens=self.settings.max_response_tokens)

    @staticmethod
    def _answer(groups, n):
        from core.algo.genselect import parse_judgment

        return 200, {"index": parse_judgment(groups[0].rollouts[0].response_text, n).index}

    def select(self, body):
        import ray

        return self._answer(ray.get(self._call(body)), len(body["candidates"]))

    async def select_async(self, body):
        return self._answer(await self._call(body), len(body["candidates"]))

    def close(self):
        import ray

        ray.get(self.actor.shutdown.remote(), timeout=120)
        ray.kill(self.actor)


if __name__ == "__main__":
    sys.exit(main())
