"""The container figures of BENCHMARKS.md: how long the project's CPU image takes to build (`make image`: the
debootstrapped base, then cluster/image/Dockerfile.cpu on it) and how large it is, and the container runs of
tests/cluster/test_containers.py with their times: the smoke job inside one container, and a cluster of
containers (head + four workers) that takes the smoke job from `ray job submit` and survives a killed node.

    python benchmarks/containers.py [--cold] [--out benchmarks/results/containers.json]

--cold removes the project image and its base first (with their cached layers), so the times are a first
build's; without it the build finds its layers cached and its time says little. Fails (exit 1) when the build
or a container test fails. Writes JSON and prints it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cluster.kuberay.generate import default_image  # noqa: E402
from sandbox import engine as docker_engine  # noqa: E402

BASE = "genselect-base:bookworm-py311"


def _timed(cmd: list[str], **kwargs) -> float:
    start = time.monotonic()
    subprocess.run(cmd, cwd=REPO, check=True, **kwargs)
    return round(time.monotonic() - start, 1)


def _size_mb(image: str) -> int:
    out = subprocess.run(["docker", "image", "inspect", "-f", "{{.Size}}", image], capture_output=True, text=True,
                         check=True).stdout
    return round(int(out) / 1e6)


def _machine(engine: docker_engine.Engine) -> dict:
    version = subprocess.run(["docker", "version", "-f", "{{.Server.Version}}"], capture_output=True, text=True)
    return {"date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "kernel": platform.release(),
            "engine": version.stdout.strip(), "storage_driver": engine.driver, "load_avg_1m_start": os.getloadavg()[0]}


def build(cold: bool) -> dict:
    """Build the base and the CPU image (removing both first with `cold`); times and sizes."""
    tag = default_image("cpu")
    if cold:
        subprocess.run(["docker", "rmi", "-f", tag, BASE], capture_output=True)
        subprocess.run(["docker", "image", "prune", "-f"], capture_output=True)
    base_s = _timed(["sh", "cluster/image/base.sh", BASE])
    image_s = _timed(["sh", "cluster/image/build.sh", "cpu"])
    return {"cold": cold, "base_build_s": base_s, "image_build_s": image_s, "image": tag,
            "image_mb": _size_mb(tag), "base_mb": _size_mb(BASE)}


def container_tests() -> dict:
    """Run tests/cluster/test_containers.py; the times each test reported."""
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "GENSELECT_CONTAINER_TESTS": "1", "GENSELECT_BENCH_OUT": out}
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                                "tests/cluster/test_containers.py"], cwd=REPO, env=env)
        figures = {"pytest_s": round(time.monotonic() - start, 1), "passed": done.returncode == 0}
        for path in sorted(Path(out).glob("*.json")):
            figures[path.stem] = json.loads(path.read_text())
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", action="store_true", help="remove the images and their layers first")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "containers.json"))
    args = parser.parse_args(argv)
    engine = docker_engine.start()
    try:
        result = {"machine": _machine(engine), "build": build(args.cold), "tests": container_tests()}
    finally:
        docker_engine.stop(engine)
    result["machine"]["load_avg_1m_end"] = os.getloadavg()[0]
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0 if result["tests"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
