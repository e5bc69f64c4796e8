"""Serve a trained selector over HTTP: a Ray Serve application whose replicas wrap the trainer's RolloutWorker.

    python -m driver.serve --model runs/default/export [--port 8000] [--config CONFIG] [serve.KEY=VALUE ...]
    serve run cluster/serve.yaml          (or `serve deploy cluster/serve.yaml` onto a running cluster)
    python -m driver.train ... serve.live=true     (beside a training run; every policy version is pushed)

The replica class is actors/serving/selector_server.py:SelectorServer (API, errors, live weights: see its docstring and
docs/serving.md). This module resolves the settings (the model's own training run gives the
candidate window, prompt budget, response length and engine settings, when the model folder sits in a run
folder), builds the Serve application with its autoscaling config, and runs it.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path
from typing import Optional

from core.env import ROOT, apply_defaults
from core.lifetime import guarded

log = logging.getLogger("genselect.serve")
DEPLOYMENT = "SelectorServer"
PROXY_PATIENCE_S = 300.0  # how long start() waits for Serve's restarted HTTP proxy (start_serve_instance)


def run_config_of(model: str):
    """The TrainConfig of the run that produced `model` (runs/X/export -> runs/X/config.yaml), else None."""
    from core.config import from_yaml

    for folder in (Path(model), Path(model).parent):
        path = folder / "config.yaml"
        if path.is_file():
            try:
                return from_yaml(path.read_text())
            except Exception as e:  # a config of another version: fall back to the defaults, loudly
                log.warning("ignoring %s: %s", path, e)
    return None


def run_summary_of(model: str) -> dict:
    """The summary.json of the run that exported `model` (runs/X/export -> runs/X/summary.json), else {}."""
    try:
        summary = json.loads((Path(model).parent / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def exported_version(model: str) -> int:
    """Policy version of an exported model (its genselect_export.json, written by `export_every` and
    `driver.export`, else runs/X/summary.json 'policy_version'), else 0."""
    from driver.export import EXPORT_INFO

    try:
        info = Path(model) / EXPORT_INFO
        source = json.loads(info.read_text()) if info.is_file() else run_summary_of(model)
        return int(source.get("policy_version", 0))
    except (ValueError, TypeError, AttributeError):
        return 0


def served_window(model: str, train_cfg) -> int:
    """Candidates per selection prompt when serving `model`: the run's knockout window (`eval_knockout_window`)
    when its final evaluation selected at least as well by knockout as with all candidates in one prompt
    (summary.json: final_knockout_accuracy >= final_accuracy), else its data.max_candidates."""
    summary = run_summary_of(model)
    knockout, direct = summary.get("final_knockout_accuracy"), summary.get("final_accuracy")
    if train_cfg.eval_knockout_window and isinstance(knockout, (int, float)) and isinstance(direct, (int, float)) \
            and knockout >= direct:
        return train_cfg.eval_knockout_window
    return train_cfg.data.max_candidates


def served_orders(window: int, train_cfg) -> int:
    """How a group is read by default: 2 (both orders) when the served window is the run's knockout window and
    the run evaluated that knockout in both orders (`eval_knockout_both_orders`), else 1."""
    both = train_cfg.eval_knockout_both_orders and window == train_cfg.eval_knockout_window
    return 2 if both and train_cfg.rollout.constrain_index else 1


def served_selection(model: str, train_cfg) -> str:
    """The default selection procedure when serving `model`: "round_robin" when its run evaluated a round robin
    (`eval_round_robin`) and the final one scored at least as well as every other final reading in summary.json
    (knockout, one prompt), else "knockout"."""
    summary = run_summary_of(model)
    round_robin = summary.get("final_round_robin_accuracy")
    others = [summary.get(k) for k in ("final_knockout_accuracy", "final_accuracy")]
    if train_cfg.eval_round_robin != "none" and isinstance(round_robin, (int, float)) \
            and all(round_robin >= v for v in others if isinstance(v, (int, float))):
        return "round_robin"
    return "knockout"


def resolve_settings(model: str, serve_cfg, train_cfg=None, policy_version: Optional[int] = None):
    """SelectorSettings for `model`: ServeConfig values where set (non-zero), else the training run's."""
    from actors.serving.reasoning import check_name
    from actors.serving.select_request import SelectorSettings
    from core.config import TrainConfig
    from driver.models.registry import response_form

    check_name(serve_cfg.reasoning_parser)  # before anything starts: a clear error listing vLLM's parsers
    known = train_cfg or run_config_of(model)  # None: the model's own record alone picks its response form
    train_cfg = known or TrainConfig()
    rollout = dataclasses.replace(train_cfg.rollout, request_timeout_s=serve_cfg.request_timeout_s,
                                  num_workers=1)
    max_response = serve_cfg.max_response_tokens or train_cfg.rollout.max_response_tokens
    context = _context_of(model)
    max_prompt = serve_cfg.max_prompt_tokens or train_cfg.data.max_prompt_tokens
    if context:
        max_prompt = min(max_prompt, context - max_response)
    window = serve_cfg.window or served_window(model, train_cfg)
    return SelectorSettings(
        model=str(model), name=serve_cfg.app_name, rollout=rollout, dtype=train_cfg.model.dtype,
        seed=train_cfg.seed,
        policy_version=exported_version(model) if policy_version is None else policy_version,
        board=board_name(serve_cfg.app_name), window=window,
        orders=serve_cfg.orders or served_orders(window, train_cfg),
        selection=serve_cfg.selection or served_selection(model, train_cfg),
        max_round_robin_candidates=serve_cfg.max_round_robin_candidates,
        max_prompt_tokens=max_prompt, max_response_tokens=max_response, temperature=train_cfg.rollout.temperature,
        max_candidates=serve_cfg.max_candidates,
        max_candidate_chars=serve_cfg.max_candidate_chars or train_cfg.data.max_candidate_chars,
        max_problem_chars=serve_cfg.max_problem_chars, max_samples=serve_cfg.max_samples,
        max_body_bytes=serve_cfg.max_body_bytes, max_completion_tokens=serve_cfg.max_completion_tokens,
        reasoning_parser=serve_cfg.reasoning_parser,
        request_timeout_s=serve_cfg.request_timeout_s, admin_token=serve_cfg.admin_token,
        response_form=response_form(model, known))


def _context_of(model: str) -> int:
    try:
        return int(json.loads((Path(model) / "config.json").read_text()).get("max_position_embeddings") or 0)
    except (OSError, ValueError):
        return 0


def deployment_options(serve_cfg, settings=None) -> dict:
    """Serve deployment options: autoscaling between min and max replicas on ongoing requests. A replica holds one
    rollout engine: with serve.num_gpus 0 it reserves the GPUs of one rollout actor of the model's run
    (`settings.rollout.num_gpus`), so Ray gives it a GPU of its own instead of vLLM taking the node's first."""
    gpus = serve_cfg.num_gpus or (settings.rollout.num_gpus if settings is not None else 0)
    return {
        "name": DEPLOYMENT,
        "max_ongoing_requests": serve_cfg.max_ongoing_requests,
        "autoscaling_config": {"min_replicas": serve_cfg.min_replicas, "max_replicas": serve_cfg.max_replicas,
                               "initial_replicas": max(1, serve_cfg.min_replicas),
                               "target_ongoing_requests": serve_cfg.target_ongoing_requests,
                               "upscale_delay_s": serve_cfg.upscale_delay_s,
                               "downscale_delay_s": serve_cfg.downscale_delay_s,
                               "look_back_period_s": serve_cfg.look_back_period_s},
        "ray_actor_options": {"num_cpus": serve_cfg.num_cpus, "num_gpus": gpus},
        "health_check_period_s": 5.0, "health_check_timeout_s": 60.0,
        "graceful_shutdown_timeout_s": 30.0,
        "logging_config": {"enable_access_log": serve_cfg.access_log},
    }


def board_name(app_name: str) -> str:
    return f"{app_name}-weights"


def reset_board(name: str):
    """A fresh WeightBoard named `name` (an old one, from an earlier deployment, is killed first: its versions
    belong to another model). Detached: it outlives the task that builds the application (`serve deploy`)."""
    import ray

    from actors.serving.weight_board import BOARD_NAMESPACE, WeightBoard

    try:
        ray.kill(ray.get_actor(name, namespace=BOARD_NAMESPACE))
        time.sleep(0.5)
    except ValueError:
        pass
    remote = ray.remote(num_cpus=0, max_restarts=0)(WeightBoard)
    board = remote.options(name=name, namespace=BOARD_NAMESPACE, lifetime="detached").remote()
    ray.get(board.latest.remote(), timeout=60)
    return board


def build_app(settings, serve_cfg):
    """The Serve application: SelectorServer behind its FastAPI ingress, with `deployment_options`."""
    from ray import serve

    from actors.serving.selector_server import SelectorServer, app

    deployment = serve.deployment(**deployment_options(serve_cfg, settings))(serve.ingress(app)(SelectorServer))
    return deployment.bind(settings)


def app_builder(args: dict):
    """Entry for `serve run` / `serve deploy` config files (import_path: driver.serve:app_builder).

    args: {"model": path (relative paths: from the repository root), "config": an optional training config
    name or path, "policy_version": optional int, and any ServeConfig key (window, max_samples, ...)}.
    The deployment's own options (replicas, autoscaling) come from the config file's `deployments` section.
    """
    from core.config import ServeConfig, load_config

    apply_defaults()
    args = dict(args or {})
    model = args.pop("model", None)
    if not model:
        raise ValueError("serve config: application args need 'model' (a model folder)")
    model = str(Path(model) if Path(model).is_absolute() else ROOT / model)
    config = args.pop("config", None)
    version = args.pop("policy_version", None)
    serve_cfg = dataclasses.replace(ServeConfig(), **args)
    train_cfg = load_config(config) if config else None
    settings = resolve_settings(model, serve_cfg, train_cfg, version)
    reset_board(settings.board)
    return build_app(settings, serve_cfg)


def start(model: str, serve_cfg, train_cfg=None, policy_version: Optional[int] = None):
    """Deploy the application on the connected Ray instance (HTTP on serve_cfg.host:port); returns
    (ingress handle, settings). Waits until every initial replica is up (engines loaded)."""
    from ray import serve

    settings = resolve_settings(model, serve_cfg, train_cfg, policy_version)
    start_serve_instance(serve_cfg)
    reset_board(settings.board)
    handle = serve.run(build_app(settings, serve_cfg), name=serve_cfg.app_name, route_prefix="/")
    return handle, settings


def start_serve_instance(serve_cfg, patience_s: float = PROXY_PATIENCE_S) -> None:
    """`serve.start` on the connected Ray instance, patient with a slow proxy: Serve kills a proxy actor that
    is not ready in time and gives up after 60 s, while its controller goes on restarting the proxy. On a busy
    2-core machine the proxy's process can take about a minute to start (docs/serving.md), so on that failure
    this reconnects to the running controller and waits up to `patience_s` for every proxy to be healthy."""
    import ray
    from ray import serve

    http_options = {"host": serve_cfg.host, "port": serve_cfg.port}
    try:
        serve.start(http_options=http_options)
        return
    except (TimeoutError, ray.exceptions.ActorDiedError) as e:
        log.warning("Serve's HTTP proxy was not ready in time (%s); waiting up to %.0f s for the controller's "
                    "restart of it", type(e).__name__, patience_s)
    serve.start(http_options=http_options)  # the controller is up: this connects to it
    wait_for_healthy_proxies(patience_s)


def wait_for_healthy_proxies(patience_s: float, poll_s: float = 1.0) -> None:
    """Block until every proxy Serve reports is HEALTHY; RuntimeError naming their states after `patience_s`."""
    from ray import serve
    from ray.serve.schema import ProxyStatus

    deadline, states = time.monotonic() + patience_s, {}
    while time.monotonic() < deadline:
        states = serve.status().proxies
        if states and all(state == ProxyStatus.HEALTHY for state in states.values()):
            return
        time.sleep(poll_s)
    raise RuntimeError(f"Serve's HTTP proxies were not healthy after {patience_s:.0f} s: {states or 'none'}; "
                       f"see the Ray session's logs/serve/proxy_*.log")


def stop(serve_cfg) -> None:
    """Delete the application (replicas shut their engines down) and its weight board."""
    import ray
    from ray import serve

    from actors.serving.weight_board import BOARD_NAMESPACE

    try:
        serve.delete(serve_cfg.app_name)
    except Exception as e:
        log.warning("serve.delete(%s): %r", serve_cfg.app_name, e)
    try:
        ray.kill(ray.get_actor(board_name(serve_cfg.app_name), namespace=BOARD_NAMESPACE))
    except ValueError:
        pass


def _parse(argv) -> tuple:
    parser = argparse.ArgumentParser(prog="python -m driver.serve", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="serve.KEY=VALUE overrides: see `python -m driver.train --help` "
                                            "(section serve.*)")
    parser.add_argument("--model", help="model folder to serve (default: runs/default/export)",
                        default="runs/default/export")
    parser.add_argument("--config", default=None, help="training config (name in configs/ or YAML path) whose "
                                                        "serve.* section and data/rollout settings apply; default: "
                                                        "the config.yaml of the model's run folder")
    parser.add_argument("--port", type=int, default=None, help="HTTP port (default serve.port, 8000)")
    parser.add_argument("--host", default=None, help="HTTP address (default serve.host, 127.0.0.1)")
    parser.add_argument("--address", default="", help="Ray cluster to join ('' starts a local instance)")
    parser.add_argument("--policy-version", type=int, default=None,
                        help="version reported for the served weights (default: the run's summary.json)")
    parser.add_argument("overrides", nargs="*", help="serve.KEY=VALUE")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    """The command line. The process a user starts only guards the server, which runs in its child
    (core/lifetime.py): whichever of the two is killed, every process the server started (Ray's, HAProxy, the
    engines) is stopped with it, so the port is free again for the next start."""
    argv = sys.argv[1:] if argv is None else list(argv)
    status = guarded("driver.serve", argv)
    if status is not None:
        return status
    apply_defaults()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from core.config import ConfigError, load_config

    args = _parse(argv)
    model = Path(args.model)
    if not (model / "config.json").is_file():
        print(f"error: {model} is not a model folder (no config.json); train first (`make train`) or pass "
              f"--model", file=sys.stderr)
        return 2
    bad = [o for o in args.overrides if not o.startswith("serve.") or "=" not in o]
    if bad:
        print(f"error: overrides must look like serve.KEY=VALUE, got {bad}", file=sys.stderr)
        return 2
    try:
        train_cfg = load_config(args.config, args.overrides) if args.config else run_config_of(str(model))
        if train_cfg is None:
            train_cfg = load_config("default", args.overrides)
        elif not args.config and args.overrides:
            from omegaconf import OmegaConf

            merged = OmegaConf.merge(OmegaConf.structured(train_cfg), OmegaConf.from_dotlist(args.overrides))
            train_cfg = OmegaConf.to_object(merged)
    except (ConfigError, Exception) as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    serve_cfg = train_cfg.serve
    serve_cfg = dataclasses.replace(serve_cfg, port=args.port or serve_cfg.port, host=args.host or serve_cfg.host)

    import signal

    import ray
    from ray import serve

    from core.env import default_env, quiet_local_ray_auth_notice

    def _interrupt(signum, frame):  # once: Ctrl-C reaches this process both from the terminal and the guard
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    env = {"env_vars": default_env()}
    if args.address:
        ray.init(address=args.address, runtime_env=env)
    else:
        quiet_local_ray_auth_notice()
        ray.init(address="local", include_dashboard=False, runtime_env=env)
    # after ray.init, which sets its own SIGTERM handler (sys.exit, past the `except` below)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops it as cleanly as Ctrl-C
    signal.signal(signal.SIGINT, _interrupt)   # also when started in the background (SIGINT ignored there)
    try:
        _, settings = start(str(model.resolve()), serve_cfg, train_cfg, args.policy_version)
        url = f"http://{serve_cfg.host}:{serve_cfg.port}"
        print(f"serving {model} (policy version {settings.policy_version}, selection {settings.selection}, "
              f"window {settings.window}, {'each group read in both orders, ' if settings.orders == 2 else ''}"
              f"prompt budget {settings.max_prompt_tokens} tokens) at {url}\n"
              f"  curl {url}/healthz\n  Ctrl-C stops", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("stopping", flush=True)
    finally:
        stop(serve_cfg)
        serve.shutdown()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
