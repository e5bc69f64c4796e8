"""The rollout engine's model runner and attention backend: chosen explicitly, refused when they cannot run."""
import pytest

from core.engine_backends import ATTENTION_DTYPES, choose


def test_defaults_pick_a_backend_with_kernels_for_the_dtype():
    assert choose("", "v1", "float32", on_gpu=True)["attention_backend"] == "TRITON_ATTN"
    assert choose("", "v1", "bfloat16", on_gpu=True)["attention_backend"] == "FLASH_ATTN"
    assert choose("", "v1", "float32", on_gpu=False)["attention_backend"] == "CPU_ATTN"
    assert choose("", "v1", "float32", on_gpu=True)["env"] == {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    assert choose("FLEX_ATTENTION", "v2", "float32", on_gpu=True)["env"] == {"VLLM_USE_V2_MODEL_RUNNER": "1"}


@pytest.mark.parametrize("backend, runner, dtype, on_gpu, message", [
    ("FLASH_ATTN", "v1", "float32", True, "has no float32 kernels"),
    ("FLASHINFER", "v1", "float32", True, "use TRITON_ATTN or FLEX_ATTENTION"),
    ("XFORMERS", "v1", "bfloat16", True, "is not one of"),
    ("CPU_ATTN", "v1", "float32", True, "does not run on a GPU"),
    ("TRITON_ATTN", "v1", "float32", False, "does not run on CPU"),
    ("", "v3", "float32", True, "rollout.model_runner='v3'"),
])
def test_choices_that_cannot_run_are_refused_naming_the_key(backend, runner, dtype, on_gpu, message):
    with pytest.raises(ValueError, match=message):
        choose(backend, runner, dtype, on_gpu)


def test_every_name_is_a_vllm_attention_backend():
    registry = pytest.importorskip("vllm.v1.attention.backends.registry")
    assert set(ATTENTION_DTYPES) <= {b.name for b in registry.AttentionBackendEnum}


def test_the_config_refuses_a_backend_without_kernels_for_the_models_dtype():
    from core.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"rollout.attention_backend='FLASH_ATTN' has no float32 kernels"):
        load_config("smoke", ["rollout.attention_backend=FLASH_ATTN", "rollout.num_gpus=1", "model.dtype=float32"])
    with pytest.raises(ConfigError, match=r"rollout.model_runner='v9' is not one of"):
        load_config("smoke", ["rollout.model_runner=v9"])
    cfg = load_config("smoke", ["rollout.attention_backend=TRITON_ATTN", "rollout.num_gpus=1", "learner.num_gpus=1"])
    assert cfg.rollout.attention_backend == "TRITON_ATTN"


COLOCATED = ["weight_sync.transport.name=ipc", "learner.num_gpus=0.5", "rollout.num_gpus=0.5",
             "rollout.gpu_memory_utilization=0.4", "cluster.placement_strategy=STRICT_PACK"]


def test_colocated_ipc_needs_one_shared_gpu_and_an_explicit_memory_split():
    from core.config import ConfigError, load_config

    cfg = load_config("smoke", COLOCATED)
    assert cfg.weight_sync.transport["name"] == "ipc"
    load_config("smoke", ["weight_sync.transport.name=ipc",
                          "cluster.placement_strategy=STRICT_PACK"])  # CPU: shm channel
    load_config("smoke", COLOCATED[:3] + COLOCATED[4:] + ["rollout.gpu_memory_utilization=0.9",
                                                          "rollout.kv_cache_memory_bytes=4000000000"])
    for extra, message in [
        (["rollout.gpu_memory_utilization=0.9"], "rollout.kv_cache_memory_bytes, or rollout.gpu_memory_utilization "
                                                 "at most 0.5"),
        (["learner.num_gpus=1"], "at most 1 together"),
        (["learner.num_gpus=0"], "must be > 0 each and at most 1 together, or both 0 on CPU"),
        (["rollout.num_workers=2"], "one learner rank with one engine"),
        (["cluster.placement_strategy=PACK"], "must be STRICT_PACK"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load_config("smoke", COLOCATED + extra)
