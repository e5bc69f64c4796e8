"""Suite-wide environment: CPU backends, offline hubs, caches inside the repository, GPU/docker skips."""
import pytest

from core.env import apply_defaults

apply_defaults()


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (none on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
