"""`make setup-gpu` (scripts/setup.sh --gpu) checks the NVIDIA driver before it installs anything: without
nvidia-smi, with one that fails, or with a driver older than requirements/gpu.txt's `nvidia-driver>=` line it stops
at once naming what is missing and what to install; with a good driver `--check-only` goes up to where it would
install. The script runs in a copy of what it reads, with a PATH of the tools it uses and a fake nvidia-smi."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COPIED = ["scripts/setup.sh", "requirements/gpu.txt", "requirements/cpu.txt", "requirements/cpu-constraints.txt",
          "sandbox/install.sh", "pyproject.toml"]
TOOLS = ["bash", "sh", "cat", "sha256sum", "cut", "sed", "grep", "sort", "head", "tr", "paste", "uniq", "dirname"]


def _min_driver() -> str:
    line = next(l for l in (ROOT / "requirements/gpu.txt").read_text().splitlines() if "nvidia-driver>=" in l)
    return line.split(">=")[1].split()[0]


@pytest.fixture
def checkout(tmp_path):
    """(folder, run): a copy of the files setup.sh reads, and a function that runs it there with only TOOLS (and
    the fake nvidia-smi, when given as the text it prints and its exit status) on PATH."""
    for rel in COPIED:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        os.symlink(shutil.which(tool), bin_dir / tool)

    def run(*args, nvidia_smi=None):
        fake = bin_dir / "nvidia-smi"
        fake.unlink(missing_ok=True)
        if nvidia_smi is not None:
            text, status = nvidia_smi
            fake.write_text(f"#!/bin/sh\ncat <<'END'\n{text}\nEND\nexit {status}\n")
            fake.chmod(0o755)
        env = {"PATH": str(bin_dir), "PYTHON": sys.executable, "HOME": str(tmp_path)}
        started = time.time()
        proc = subprocess.run(["bash", str(tmp_path / "scripts/setup.sh"), *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
        proc.seconds = time.time() - started
        return proc

    return tmp_path, run


def test_without_nvidia_smi_it_stops_naming_the_driver_to_install(checkout):
    folder, run = checkout
    proc = run("--gpu", "--check-only")
    assert proc.returncode == 1 and proc.seconds < 10
    assert proc.stderr.startswith(f"[setup] error: nvidia-smi not found: the GPU environment needs an NVIDIA GPU and "
                                  f"its driver, {_min_driver()} or newer"), proc.stderr
    assert "CUDA 13.0" in proc.stderr and f"nvidia-driver-{_min_driver()}" in proc.stderr
    assert "make setup-gpu" in proc.stderr and "make setup` (the CPU environment)" in proc.stderr
    assert not (folder / ".venv").exists()
    assert run("--gpu").returncode == 1 and not (folder / ".venv").exists()  # without --check-only too


def test_a_driver_that_fails_or_is_too_old_is_refused(checkout):
    _, run = checkout
    failed = run("--gpu", "--check-only", nvidia_smi=("NVIDIA-SMI has failed because it couldn't communicate with "
                                                      "the NVIDIA driver.", 9))
    assert failed.returncode == 1
    assert "nvidia-smi found no GPU or no working driver; it said:\n    NVIDIA-SMI has failed" in failed.stderr
    old = run("--gpu", "--check-only", nvidia_smi=("535.104.05, NVIDIA A100-SXM4-80GB", 0))
    assert old.returncode == 1
    assert old.stderr.startswith(f"[setup] error: the NVIDIA driver is 535.104.05; the GPU environment needs "
                                 f"{_min_driver()} or newer"), old.stderr


def test_a_good_driver_goes_up_to_the_install(checkout):
    folder, run = checkout
    proc = run("--gpu", "--check-only", nvidia_smi=(f"{_min_driver()}.65.06, NVIDIA H100 80GB HBM3", 0))
    assert proc.returncode == 0, proc.stderr
    assert f"[setup] NVIDIA driver {_min_driver()}.65.06 (at least {_min_driver()}): 1 NVIDIA H100 80GB HBM3" in \
        proc.stdout
    assert "would install requirements/gpu.txt into .venv" in proc.stdout and not (folder / ".venv").exists()
    newer = run("--gpu", "--check-only", nvidia_smi=(f"{int(_min_driver()) + 10}.12, NVIDIA H200", 0))
    assert newer.returncode == 0, newer.stderr


def test_the_cpu_and_gpu_environments_do_not_share_venv(checkout):
    folder, run = checkout
    good = (f"{_min_driver()}.65.06, NVIDIA H100 80GB HBM3", 0)
    (folder / ".venv").mkdir()
    (folder / ".venv/.genselect-setup").write_text("cpu 0123456789abcdef\n")
    refused = run("--gpu", "--check-only", nvidia_smi=good)
    assert refused.returncode == 1 and ".venv holds the CPU environment (make setup)" in refused.stderr
    assert "rm -rf .venv" in refused.stderr
    (folder / ".venv/.genselect-setup").write_text("gpu 0123456789abcdef\n")
    kept = run("--check-only")  # make train / make test after make setup-gpu: the GPU environment is kept
    assert kept.returncode == 0 and ".venv holds the GPU environment (make setup-gpu); keeping it" in kept.stdout


def test_make_setup_gpu_runs_the_gpu_setup():
    if not shutil.which("make"):
        pytest.skip("no make on this machine")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}  # under make test
    out = subprocess.run(["make", "--no-print-directory", "-n", "setup-gpu"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "bash scripts/setup.sh --gpu"


def test_on_this_machine_the_gpu_setup_stops_at_the_driver_check():
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    started = time.time()
    proc = subprocess.run(["bash", "scripts/setup.sh", "--gpu", "--check-only"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and time.time() - started < 10
    assert "[setup] error: nvidia-smi not found" in proc.stderr
