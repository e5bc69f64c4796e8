"""The project as a wheel, used outside the checkout: the wheel holds every package a run imports (the tiny recipe
included), the configs and the files read beside the code; installed into a folder of its own and run from another
working directory, a config resolves by name and the recipe imports, with nothing read from the checkout."""
import json
import os
import pkgutil
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
PACKAGES = sorted(name.rstrip("*") for name in INCLUDE)


def _pip(*args, cwd):
    proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel, site): the wheel built from a copy of the sources (the build writes nothing into the checkout) and
    the folder it is installed into (`pip install --no-deps --target`)."""
    tmp = tmp_path_factory.mktemp("packaging")
    src = tmp / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    _pip("wheel", "--no-deps", "--no-build-isolation", str(src), "-w", str(tmp / "dist"), cwd=tmp)
    (wheel,) = (tmp / "dist").glob("genselect_rl-*.whl")
    _pip("install", "--no-deps", "--no-compile", "--target", str(tmp / "site"), str(wheel), cwd=tmp)
    return wheel, tmp / "site"


def _env(*paths) -> dict:
    """This environment with PYTHONPATH `paths` and without the checkout's paths that conftest's defaults set."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_SERVE_HAPROXY_BINARY_PATH")}
    return {**env, "PYTHONPATH": os.pathsep.join(dict.fromkeys(map(str, paths)))}


def _outside(site: Path, cwd: Path, *args, timeout=120):
    """`python -S ARGS` in `cwd` with `site` first and the environment's site-packages for the dependencies: no
    .pth file runs, so the checkout's editable install cannot answer an import."""
    env = _env(site, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])
    return subprocess.run([sys.executable, "-S", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_wheel_holds_every_package_the_configs_and_the_files_beside_the_code(installed):
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"tiny_recipe", "configs", "core", "actors", "driver", "sandbox", "cluster"} <= set(PACKAGES)
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "__pycache__" not in path.parts:
                assert path.relative_to(ROOT).as_posix() in names, f"the wheel lacks {path.relative_to(ROOT)}"
    for folder in ("configs", "cluster/topologies"):
        for path in (ROOT / folder).glob("*.yaml"):
            assert path.relative_to(ROOT).as_posix() in names, f"the wheel lacks {path.relative_to(ROOT)}"
    assert {"cluster/serve/haproxy", "cluster/serve/selector.yaml", "sandbox/install.sh"} <= names
    assert not any(n.startswith(("tests/", "benchmarks/", "scripts/")) for n in names)


def test_installed_outside_the_checkout_a_config_resolves_by_name_and_the_recipe_imports(installed, tmp_path):
    _, site = installed
    modules = ["core.config", "core.env", "driver.train", "driver.models.registry", "cluster.topology",
               "cluster.ingress"] + [f"tiny_recipe.{m.name}" for m in pkgutil.iter_modules([str(ROOT / "tiny_recipe")])]
    probe = ("import importlib, json, os, sys\n"
             f"mods = {modules!r}\n"
             "files = {m: importlib.import_module(m).__file__ for m in mods}\n"
             "from core.config import CONFIG_DIR, resolve_config_path\n"
             "from core.env import CACHE, default_env\n"
             "from cluster.ingress import SHIM\n"
             "print(json.dumps({'files': files, 'smoke': str(resolve_config_path('smoke')), 'cache': str(CACHE),\n"
             "                  'shim': os.access(SHIM, os.X_OK), 'pythonpath': default_env()['PYTHONPATH']}))\n")
    proc = _outside(site, tmp_path, "-c", probe)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(Path(f).is_relative_to(site) for f in found["files"].values()), found["files"]
    assert Path(found["smoke"]) == site / "configs" / "smoke.yaml"
    assert Path(found["cache"]) == tmp_path / ".cache"  # the working directory's, not the install folder's
    assert found["shim"] and found["pythonpath"].split(os.pathsep)[0] == str(site)

    plan = _outside(site, tmp_path, "-m", "driver.train", "smoke", "--plan")
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert plan.stdout.startswith("config smoke: placement on this machine")
    gpu = _outside(site, tmp_path, "-m", "driver.train", "paper_math_1node", "--plan")
    assert gpu.returncode == 0, gpu.stderr[-3000:]
    assert f"placement on topology gpu-1node ({site / 'cluster' / 'topologies' / 'gpu_1node.yaml'}" in gpu.stdout
    assert not list(tmp_path.iterdir())  # --plan writes nothing


@pytest.mark.slow
@pytest.mark.e2e
def test_the_smoke_run_trains_from_the_installed_package(installed, tmp_path):
    """The whole actor system from the installed folder: `python -m driver.train smoke` in another directory, the
    Ray actors importing the installed packages (core/env.py puts the folder first on their PYTHONPATH), with the
    checkout's prepared model, dataset and compiled ops (.cache, which the end-to-end tests fill). About 70 s on the
    2-core machine with those ready; from nothing (warm-start, DeepSpeed's op) 350 s."""
    _, site = installed
    cache = ROOT / ".cache"
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "driver.train", "smoke", f"run_dir={run_dir}", "progress=false",
                           f"model.cache_dir={cache / 'models'}", f"data.out_dir={cache / 'datasets'}"],
                          cwd=tmp_path, env=_env(site), capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 3 and (run_dir / "export" / "config.json").is_file()
    assert "Ray session local" in (run_dir / "train.log").read_text()
