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


def test_a_local_ray_instance_keeps_token_auth_without_the_console_warning():
    """Ray 2.60 turns token authentication on for a fresh local instance and warns on the console at every
    start; after core.env.quiet_local_ray_auth_notice the instance still runs with tokens and the line is gone."""
    import os
    import subprocess
    import sys

    script = ("import ray\nfrom core.env import quiet_local_ray_auth_notice\nquiet_local_ray_auth_notice()\n"
              "ray.init(address='local', num_cpus=1, include_dashboard=False, log_to_driver=False)\n"
              "from ray._private.authentication.authentication_utils import is_token_auth_enabled\n"
              "print('token auth', is_token_auth_enabled())\nray.shutdown()\n")
    clean = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    done = subprocess.run([sys.executable, "-c", script], cwd=env.ROOT, env=clean, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "token auth True" in done.stdout
    assert "Token authentication is enabled" not in done.stderr + done.stdout


def test_caches_live_in_the_checkout_or_under_the_working_directory_of_an_installed_package(tmp_path):
    from core.env import ROOT, cache_root

    assert cache_root() == ROOT / ".cache"  # the checkout: pyproject.toml beside the packages
    site, work = tmp_path / "site", tmp_path / "work"
    site.mkdir()
    assert cache_root(site, work) == work / ".cache"
