"""Process-environment defaults: values already set win; a submitted job's own env vars are left to it."""
import json

from core import env


def test_defaults_keep_values_already_set(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "INFO")
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    values = env.default_env(tmp_path)
    assert values["VLLM_LOGGING_LEVEL"] == "INFO"
    assert values["TORCH_EXTENSIONS_DIR"] == str(tmp_path / "torch_extensions")
    assert values["PYTHONPATH"].split(":") == [str(env.ROOT), "/elsewhere"]


def test_job_env_var_names_reads_the_submitted_runtime_env():
    job = {"runtime_env": {"working_dir": "gcs://x.zip", "env_vars": {"HF_HUB_OFFLINE": "1", "A": "b"}}}
    assert env.job_env_var_names(json.dumps(job)) == {"HF_HUB_OFFLINE", "A"}
    assert env.job_env_var_names(json.dumps({"runtime_env": {}})) == set()
    assert env.job_env_var_names("") == set()
