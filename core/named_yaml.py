"""Find a YAML file by name in a folder of them, or take a path as it is (configs/, cluster/topologies/).

Pure: standard library only, so `cluster/topology.py` (pure as well) and `core/config.py` share it.
"""
from __future__ import annotations

from pathlib import Path


def find_named_yaml(name_or_path: str, folder: Path, what: str) -> Path:
    """`NAME` -> `folder/NAME.yaml`; an existing `.yaml`/`.yml` path is returned as it is.

    Raises:
        LookupError: neither, with a message that names `what` and the known names.
    """
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    candidate = folder / f"{name_or_path}.yaml"
    if candidate.exists():
        return candidate
    known = sorted(p.stem for p in folder.glob("*.yaml"))
    raise LookupError(f"{what} {name_or_path!r} not found: neither a YAML file nor one of {known}")
