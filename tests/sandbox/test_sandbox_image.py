"""The sandbox image (sandbox/docker/build_image.sh: debootstrap + `docker import`, no registry): it is the one the
current recipe builds, and it runs Debian's python3 as the unprivileged user 65534, which must be able to reach
the interpreter (an image whose / kept mktemp's 0700 mode could run nothing)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker
RECIPE = Path(__file__).resolve().parents[2] / "sandbox" / "docker" / "build_image.sh"


def _inspect(image: str, template: str) -> str:
    return subprocess.run(["docker", "image", "inspect", "-f", template, image], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_image_is_the_one_the_current_recipe_builds(docker_engine):
    recipe = hashlib.sha256(RECIPE.read_bytes()).hexdigest()[:16]
    assert _inspect(docker_engine, '{{index .Config.Labels "genselect.recipe"}}') == recipe
    assert _inspect(docker_engine, "{{.Config.User}}") == "65534:65534"


def test_the_image_runs_python_as_the_unprivileged_user(docker_engine):
    probe = ("import os, sys; print(os.getuid(), os.getgid(), oct(os.stat('/').st_mode & 0o777), "
             "sys.executable, sys.version_info[:2] >= (3, 11), os.access('/usr', os.W_OK))")
    done = subprocess.run(["docker", "run", "--rm", "--network", "none", docker_engine, "/usr/bin/python3", "-c",
                           probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["65534", "65534", "0o755", "/usr/bin/python3", "True", "False"]
