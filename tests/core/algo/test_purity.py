"""core/algo must import only stdlib, numpy and torch: checked in a fresh interpreter."""

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORE = ["core.algo.dapo", "core.algo.bon", "core.algo.metrics", "core.algo.passk", "core.algo.knockout"]
OPTIONAL = ["core.algo.genselect", "core.records"]
FORBIDDEN = {"ray", "vllm", "deepspeed", "transformers"}


def pure_modules() -> list[str]:
    """The core modules plus the optional ones that exist in this checkout."""
    return CORE + [name for name in OPTIONAL if importlib.util.find_spec(name) is not None]


def test_algo_imports_nothing_heavy():
    modules = pure_modules()
    code = (
        f"import {', '.join(modules)}; import sys; "
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}); "
        "assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
