"""driver/serve.py without starting anything: settings resolution, deployment options, the Serve config file."""
import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from core.config import ServeConfig, TrainConfig, load_config, to_yaml
from driver.serve import DEPLOYMENT, deployment_options, resolve_settings

ROOT = Path(__file__).resolve().parents[2]


def _model_folder(path: Path, context: int = 4096) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"max_position_embeddings": context}))
    return path


def test_settings_come_from_the_models_run(tmp_path):
    """runs/X/export is served with runs/X's trained window, budget, response length and final version."""
    cfg = load_config("smoke")
    run = tmp_path / "run"
    export = _model_folder(run / "export")
    (run / "config.yaml").write_text(to_yaml(cfg))
    (run / "summary.json").write_text(json.dumps({"policy_version": 17}))
    s = resolve_settings(str(export), ServeConfig())
    assert (s.window, s.max_response_tokens, s.policy_version) == (cfg.data.max_candidates,
                                                                   cfg.rollout.max_response_tokens, 17)
    assert s.max_prompt_tokens == cfg.data.max_prompt_tokens and s.temperature == cfg.rollout.temperature
    assert s.board == "genselect-selector-weights"
    s = resolve_settings(str(export), ServeConfig(window=3, max_prompt_tokens=100), policy_version=2)
    assert (s.window, s.max_prompt_tokens, s.policy_version) == (3, 100, 2)


def test_served_window_is_the_runs_knockout_window_when_knockout_scored_at_least_as_well(tmp_path):
    """A run that evaluated by a knockout of pairs and scored better that way is served with pairs; a run whose
    direct evaluation was better, or whose summary has no knockout figure, keeps its data.max_candidates."""
    cfg = load_config("smoke")
    cfg.eval_knockout_window, cfg.data.max_candidates = 2, 6
    run = tmp_path / "run"
    export = _model_folder(run / "export")
    (run / "config.yaml").write_text(to_yaml(cfg))
    windows = []
    for summary in ({"final_accuracy": 0.44, "final_knockout_accuracy": 0.66},
                    {"final_accuracy": 0.60, "final_knockout_accuracy": 0.55},
                    {"final_accuracy": 0.44, "final_knockout_accuracy": None}, {}):
        (run / "summary.json").write_text(json.dumps(summary))
        windows.append(resolve_settings(str(export), ServeConfig()).window)
    assert windows == [2, 6, 6, 6]
    (run / "summary.json").write_text(json.dumps({"final_accuracy": 0.4, "final_knockout_accuracy": 0.6}))
    assert resolve_settings(str(export), ServeConfig(window=4)).window == 4  # an explicit window wins


def test_groups_are_read_in_both_orders_when_the_run_evaluated_its_served_knockout_so(tmp_path):
    cfg = load_config("smoke")
    cfg.eval_knockout_window, cfg.data.max_candidates, cfg.eval_knockout_both_orders = 2, 6, True
    run = tmp_path / "run"
    export = _model_folder(run / "export")
    (run / "config.yaml").write_text(to_yaml(cfg))
    (run / "summary.json").write_text(json.dumps({"final_accuracy": 0.44, "final_knockout_accuracy": 0.66}))
    assert resolve_settings(str(export), ServeConfig()).orders == 2
    assert resolve_settings(str(export), ServeConfig(window=4)).orders == 1  # not the window it was evaluated at
    assert resolve_settings(str(export), ServeConfig(orders=1)).orders == 1  # an explicit choice wins
    cfg.eval_knockout_both_orders = False
    (run / "config.yaml").write_text(to_yaml(cfg))
    assert resolve_settings(str(export), ServeConfig()).orders == 1


def test_round_robin_is_served_when_the_run_evaluated_it_and_it_scored_best(tmp_path):
    cfg = load_config("smoke")
    cfg.eval_knockout_window, cfg.data.max_candidates, cfg.eval_round_robin = 2, 6, "answer"
    run = tmp_path / "run"
    export = _model_folder(run / "export")
    (run / "config.yaml").write_text(to_yaml(cfg))
    selections = []
    for summary in ({"final_accuracy": 0.44, "final_knockout_accuracy": 0.64, "final_round_robin_accuracy": 0.70},
                    {"final_accuracy": 0.44, "final_knockout_accuracy": 0.66, "final_round_robin_accuracy": 0.60},
                    {"final_accuracy": 0.44, "final_knockout_accuracy": 0.66}):
        (run / "summary.json").write_text(json.dumps(summary))
        selections.append(resolve_settings(str(export), ServeConfig()).selection)
    assert selections == ["round_robin", "knockout", "knockout"]
    assert resolve_settings(str(export), ServeConfig(selection="round_robin")).selection == "round_robin"
    cfg.eval_round_robin = "none"  # a figure in the summary without the run's setting does not count
    (run / "config.yaml").write_text(to_yaml(cfg))
    (run / "summary.json").write_text(json.dumps({"final_accuracy": 0.4, "final_round_robin_accuracy": 0.9}))
    assert resolve_settings(str(export), ServeConfig()).selection == "knockout"


def test_prompt_budget_leaves_room_for_the_judgment(tmp_path):
    model = _model_folder(tmp_path / "m", context=1000)
    s = resolve_settings(str(model), ServeConfig(max_prompt_tokens=5000, max_response_tokens=40), TrainConfig())
    assert s.max_prompt_tokens == 960


def test_the_reasoning_parser_is_one_of_vllms_and_reaches_the_replicas(tmp_path):
    """serve.reasoning_parser: an unknown name stops the start with vLLM's list; a known one is in the settings."""
    model = _model_folder(tmp_path / "m")
    with pytest.raises(ValueError, match="serve.reasoning_parser='r1' is not one of .*deepseek_r1"):
        resolve_settings(str(model), ServeConfig(reasoning_parser="r1"), TrainConfig())
    settings = resolve_settings(str(model), ServeConfig(reasoning_parser="qwen3"), TrainConfig())
    assert settings.reasoning_parser == "qwen3"
    assert resolve_settings(str(model), ServeConfig(), TrainConfig()).reasoning_parser == ""


def test_deployment_options_autoscale():
    opts = deployment_options(ServeConfig(min_replicas=1, max_replicas=3, target_ongoing_requests=8))
    assert opts["name"] == DEPLOYMENT and opts["max_ongoing_requests"] == 64
    auto = opts["autoscaling_config"]
    assert (auto["min_replicas"], auto["max_replicas"], auto["target_ongoing_requests"]) == (1, 3, 8)
    from ray.serve.config import AutoscalingConfig

    AutoscalingConfig(**auto)  # Serve accepts it


def test_serve_config_file_is_a_valid_serve_deploy_config():
    """cluster/serve/selector.yaml parses as Serve's deploy schema (what RayService's serveConfigV2 holds), names
    this deployment and builder, and passes only args the builder understands."""
    from ray.serve.schema import ServeDeploySchema

    raw = yaml.safe_load((ROOT / "cluster/serve/selector.yaml").read_text())
    schema = ServeDeploySchema.model_validate(raw) if hasattr(ServeDeploySchema, "model_validate") \
        else ServeDeploySchema.parse_obj(raw)
    app = schema.applications[0]
    assert app.import_path == "driver.serve:app_builder" and app.deployments[0].name == DEPLOYMENT
    args = dict(app.args)
    assert "model" in args
    fields = {f.name for f in dataclasses.fields(ServeConfig)}
    assert set(args) - {"model", "config", "policy_version"} <= fields


def test_serve_live_follows_every_weight_transport_and_checks_its_replicas():
    from core.config import ConfigError

    for backend in ("gloo", "ipc"):  # the coordinator publishes to the board whatever the transport
        assert load_config("smoke", ["serve.live=true", f"weight_sync.transport.name={backend}",
                                     "cluster.placement_strategy=STRICT_PACK"]).serve.live
    with pytest.raises(ConfigError, match="serve.max_replicas"):
        load_config("smoke", ["serve.min_replicas=3", "serve.max_replicas=2"])


class _FakeServe:
    """ray.serve's start/status as the controller answers them: the first start fails like a proxy killed
    before it was ready (seen on a loaded machine), then the restarted proxy turns HEALTHY after `starting_polls`."""

    def __init__(self, first_error: Exception, starting_polls: int):
        self.first_error, self.starting_polls, self.starts, self.polls = first_error, starting_polls, [], 0

    def start(self, http_options):
        self.starts.append(http_options)
        if len(self.starts) == 1 and self.first_error:
            raise self.first_error

    def status(self):
        from ray.serve.schema import ProxyStatus

        self.polls += 1
        state = ProxyStatus.HEALTHY if self.polls > self.starting_polls else ProxyStatus.STARTING
        return type("Status", (), {"proxies": {"node-1": state}})()


@pytest.mark.parametrize("first_error", [TimeoutError("HTTP proxies not available after 60s."), None])
def test_start_waits_for_the_restarted_proxy_after_serve_gave_up_on_it(monkeypatch, first_error):
    """A proxy that is slow to start makes serve.start fail while the controller restarts it: start reconnects
    and returns once the proxy is HEALTHY (and a start that succeeds at once polls nothing)."""
    from ray import serve

    from driver import serve as driver_serve

    fake = _FakeServe(first_error, starting_polls=3)
    monkeypatch.setattr(serve, "start", fake.start)
    monkeypatch.setattr(serve, "status", fake.status)
    driver_serve.start_serve_instance(ServeConfig(port=8123), patience_s=30)
    assert fake.starts[0] == {"host": ServeConfig().host, "port": 8123}
    assert (len(fake.starts), fake.polls) == ((2, 4) if first_error else (1, 0))


def test_start_names_the_proxy_states_when_the_proxy_never_becomes_healthy(monkeypatch):
    from ray import serve

    from driver import serve as driver_serve

    fake = _FakeServe(TimeoutError("not available"), starting_polls=10 ** 6)
    monkeypatch.setattr(serve, "start", fake.start)
    monkeypatch.setattr(serve, "status", fake.status)
    with pytest.raises(RuntimeError, match="not healthy after 0 s.*STARTING"):
        driver_serve.start_serve_instance(ServeConfig(), patience_s=0.2)


def test_a_replica_reserves_the_gpu_its_engine_runs_on(tmp_path):
    """A replica holds one rollout engine: with serve.num_gpus unset it reserves what the model's run gave each
    rollout actor, so Ray hands it a GPU of its own (CUDA_VISIBLE_DEVICES) instead of vLLM taking GPU 0 of the node."""
    cfg = load_config("smoke")
    gpu_run = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, num_gpus=1.0))
    settings = resolve_settings(str(_model_folder(tmp_path / "m")), ServeConfig(), gpu_run)
    assert deployment_options(ServeConfig(), settings)["ray_actor_options"]["num_gpus"] == 1.0
    assert deployment_options(ServeConfig(num_gpus=0.5), settings)["ray_actor_options"]["num_gpus"] == 0.5
    cpu_settings = resolve_settings(str(_model_folder(tmp_path / "c")), ServeConfig(), cfg)
    assert deployment_options(ServeConfig(), cpu_settings)["ray_actor_options"]["num_gpus"] == 0


def test_a_replica_that_sees_gpus_it_did_not_reserve_refuses_to_start():
    from actors.serving.select_request import unreserved_gpu_error

    assert unreserved_gpu_error(visible_cuda_devices=0, reserved_gpu_ids=[]) is None  # a CPU node
    assert unreserved_gpu_error(visible_cuda_devices=1, reserved_gpu_ids=["0"]) is None
    message = unreserved_gpu_error(visible_cuda_devices=8, reserved_gpu_ids=[])
    assert "sees 8 GPUs but reserved none" in message and "serve.num_gpus" in message
