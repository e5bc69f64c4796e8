"""The image recipes (cluster/image/Dockerfile.gpu, .cpu) are validated, not built (no registry is reachable
here to pull the official Ray base image): the base is the official Ray image pinned to the Ray version of
the requirements, every requirement is pinned, every COPY source exists, and the tag the KubeRay
manifests use is the one the recipe documents, with the project's version."""
import re
import tomllib
from pathlib import Path

import pytest

from cluster import topology

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


@pytest.mark.parametrize("flavour", ["gpu", "cpu"], ids=["nvidia-recipe", "cpu-recipe"])
def test_image_recipe_is_pinned_and_complete(flavour):
    recipe = IMAGE / f"Dockerfile.{flavour}"
    steps = _instructions(recipe)
    base = [arg for op, arg in steps if op == "FROM"]
    ray_version = _pins(ROOT / "requirements" / f"{flavour}.txt")["ray"]
    assert base == [f"rayproject/ray:{ray_version}-py311-{flavour}"]
    for op, arg in steps:
        if op == "COPY":
            for source in arg.split()[:-1]:
                assert (ROOT / source).exists(), f"{recipe.name}: COPY {source} does not exist"
    assert any(op == "RUN" and f"requirements/{flavour}.txt" in arg for op, arg in steps)
    assert any(op == "RUN" and "pip install" in arg and "-e ." in arg for op, arg in steps)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"-t genselect-rl:{version}-{flavour}" in recipe.read_text()


def test_kuberay_image_is_the_gpu_recipe_tag():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert topology.load("paper_gpu").image == f"genselect-rl:{version}-gpu"
