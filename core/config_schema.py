"""The config schema: one tree of dataclasses (`TrainConfig`) for every entry point; the model and data sections are in
core/config_model.py, the rules a config must obey in core/config_rules.py, loading in core/config.py. The embedded
tiny recipe's section (`tiny`) is the recipe's own (tiny_recipe/config.py and its rules, tiny_recipe/config_rules.py),
named here by dotted path only (core/recipe_sections.py).

Sub-configs are passed down to the component that owns them (`Learner(cfg.learner)`), never the whole tree. Keys use
the papers' names (`eps_low`, `eps_high`, `overlong_buffer_len`, `max_staleness`). Each field's `help` metadata is its
documentation (`python -m driver.train --help` prints it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from core.config_model import DataConfig, ModelConfig, _f
from core.recipe_sections import factory as recipe_section
from core.response_forms import FORMS
from core.weight_transports import transports_help


@dataclass
class RolloutConfig:
    """vLLM rollout workers: G selector responses per prompt with behaviour log-probs."""
    num_workers: int = _f(1, "Rollout actors, one vLLM engine each.")
    samples_per_prompt: int = _f(8, "G: responses per prompt (one request with n=G; prefix cached).")
    temperature: float = _f(1.0, "Sampling temperature (paper: 1.5 for 1.7B models).")
    top_p: float = _f(1.0, "Nucleus sampling; must be 1.0 (paper: 1.0): the learner's log-probs are over the full "
                           "vocabulary, so a nucleus-truncated behaviour policy would bias the PPO/IS ratios. "
                           "There is no top_k for the same reason.")
    max_response_tokens: int = _f(48, "L_max: longest response; longer ones are truncated.")
    sync_mode: str = _f("drain", "What a weight update does with the requests in flight. 'drain': waits until "
                                 "they finish (every response from one policy version; the sync waits for the "
                                 "longest response). 'keep': freezes them in the engine (vLLM's "
                                 "pause_generation(mode='keep'), their KV cache dropped), loads the weights and "
                                 "lets them continue under the new ones (their prefix recomputed): the sync waits "
                                 "for one engine step, and a response can span two policy versions (each token's "
                                 "behaviour log-prob is the policy's that sampled it; its staleness counts from "
                                 "its first). Needs the proximal ratio (algorithm.ratio_reference 'auto' or "
                                 "'proximal').")
    constrain_index: bool = _f(True, "For a model that answers directly (no chat template: its prompt ends in "
                                     "'Judgment: ', core/chat.py), the response is one token sampled "
                                     "among the valid indices 0..N-1; the learner normalises over the same "
                                     "tokens. No effect on chat models, which reason before their judgment.")
    response_form: Dict[str, Any] = _f({"name": ""}, "How a selector's rollouts are sampled (actors/rollout/"
                                       "response_forms.py), in training, evaluation, driver.bon and /v1/select, "
                                       "one section: rollout.response_form.name is '' (default: the model's own "
                                       "form, the `response_form` hook its folder names, else free text), "
                                       f"{' or '.join(FORMS)}, or 'package.module:function', your fn(model_dir, "
                                       "cfg, **params) returning a ResponseForm; the section's other keys are the "
                                       "form's params (forced_judgment: reasoning_budget), checked before any actor "
                                       "starts (core/response_forms.py, docs/rollout.md).")
    max_num_seqs: int = _f(128, "Most sequences the engine batches at once.")
    max_num_batched_tokens: int = _f(0, "Most tokens the engine schedules in one step (vLLM's "
                                        "max_num_batched_tokens; 0: vLLM's default). Seeded candidate "
                                        "sampling on CPU admits requests while their prompts fit one step, so a "
                                        "larger step samples more problems at once.")
    kv_cache_gib: float = _f(1.0, "KV cache size per engine on CPU (VLLM_CPU_KVCACHE_SPACE).")
    gpu_memory_utilization: float = _f(0.85, "Fraction of GPU memory for vLLM (GPU only).")
    enforce_eager: bool = _f(True, "Disable graph capture / torch.compile (faster start on CPU).")
    attention_backend: str = _f("", "vLLM attention backend (a name of AttentionBackendEnum, e.g. TRITON_ATTN, "
                                    "FLEX_ATTENTION, FLASH_ATTN). '': FLASH_ATTN for bf16, TRITON_ATTN for fp32 on a "
                                    "GPU (FlashAttention has no fp32 kernels), CPU_ATTN on CPU "
                                    "(core/engine_backends.py).")
    kv_cache_memory_bytes: int = _f(0, "GPU memory for vLLM's KV cache in bytes (0: sized from "
                                       "gpu_memory_utilization). Colocated (weight_sync.transport.name=ipc): the "
                                       "explicit split of the GPU between the engine and the learner.")
    model_runner: str = _f("v1", "vLLM model runner: 'v1' (the one the weight reload is tested with) or 'v2'.")
    request_timeout_s: float = _f(0.0, "Deadline for one generation call; on expiry its requests are aborted in the "
                                       "engine and it is re-issued. 0 (default): derived per call from the prompt "
                                       "budget, max_response_tokens, max_num_seqs and min_decode_tokens_per_s "
                                       "(core/deadlines.py, docs/rollout.md#timeouts); > 0: used as it is.")
    min_decode_tokens_per_s: float = _f(4.0, "Slowest per-sequence decode rate (tokens/s, engine batch full) still "
                                             "considered healthy; the derived generate and sync deadlines allow "
                                             "this rate (prompt tokens at 10x it). Conservative: raise it to "
                                             "detect hung engines sooner.")
    num_cpus: float = _f(1.0, "CPUs reserved per rollout actor.")
    num_gpus: float = _f(0.0, "GPUs reserved per rollout actor.")


@dataclass
class VerifierConfig:
    """Verifier pool: scores the chosen candidate (math-verify in processes; code in the sandbox)."""
    num_workers: int = _f(1, "Verifier actors.")
    processes_per_worker: int = _f(1, "math-verify worker processes per actor (concurrency limit).")
    timeout_s: float = _f(10.0, "Deadline for one verification; a timeout scores 0, is counted, "
                                    "and its group is dropped from training (not trained as a wrong answer).")
    reward: Dict[str, Any] = _f({"name": "binary"}, "The reward of a named candidate, one section: "
                                "verifier.reward.name is 'binary' (1 if it is correct), 'partial' (its unit-test "
                                "pass fraction; code only), 'stored_label' (the dataset's own label) or "
                                "'package.module:function', your fn(problem, candidate, response, label, **extra, "
                                "**params) -> score in [0, 1], run in worker processes under timeout_s; the "
                                "section's other keys are its params (core/rewards.py, docs/verifier.md).")
    sandbox_backend: str = _f("bubblewrap", "Sandbox for code: 'bubblewrap' or 'docker'.")
    sandbox_timeout_s: float = _f(5.0, "Wall deadline for one sandboxed execution.")
    sandbox_memory_mb: int = _f(512, "Memory cap for one sandboxed execution.")
    num_cpus: float = _f(0.0, "CPUs reserved per verifier actor (0: shares cores; it is mostly idle).")


@dataclass
class LearnerConfig:
    """DeepSpeed learner ranks taking DAPO steps."""
    num_ranks: int = _f(1, "Data-parallel ranks (Ray actors in one process group).")
    zero_stage: int = _f(2, "DeepSpeed ZeRO stage: 2 (default) or 3.")
    dtype: str = _f("float32", "'float32' or 'bfloat16' training.")
    lr: float = _f(5e-5, "Peak learning rate (paper: 1e-6 for 1.7B).")
    weight_decay: float = _f(0.0, "AdamW weight decay.")
    betas: list = _f([0.9, 0.999], "AdamW betas.")
    lr_schedule: str = _f("constant", "'constant', 'linear' or 'cosine' decay after warm-up.")
    warmup_steps: int = _f(0, "Linear warm-up steps.")
    grad_clip: float = _f(1.0, "Global gradient-norm clip.")
    micro_batch_tokens: int = _f(8192, "Token budget of one packed micro-batch per rank.")
    gradient_checkpointing: bool = _f(False, "Recompute each decoder layer's activations in the backward pass "
                                             "instead of keeping them (about one more forward pass of compute): "
                                             "activation memory of one layer instead of all. Needed on a GPU for "
                                             "long micro-batches (paper configs: a 32K-token micro-batch of a "
                                             "0.6B model needs > 80 GB without it); off on the CPU default.")
    mini_batches_per_step: int = _f(1, "Optimizer updates per train_step (the batch split in this many "
                                       "mini-batches; > 1 makes the PPO clip active on-policy).")
    step_timeout_s: float = _f(900.0, "Deadline for one train_step call.")
    num_cpus: float = _f(1.0, "CPUs reserved per learner rank.")
    num_gpus: float = _f(0.0, "GPUs reserved per learner rank.")


@dataclass
class AlgorithmConfig:
    """DAPO (arXiv 2503.14476) and the pluggable advantage estimators."""
    advantage: Dict[str, Any] = _f({"name": "grpo"}, "The advantage estimator and its parameters, one section: "
                                   "{name, ...params} (core/estimators.py). name: 'grpo' (DAPO group-normalised), "
                                   "'loglik' ((r - mean) / mean: the gradient of log P(success)), 'maxk' (arXiv "
                                   "2510.23393), 'bon_rlb' or 'bon_rlb_p' (arXiv 2412.15287), or "
                                   "'package.module:Attr' for your own; its parameters are listed below as "
                                   "algorithm.advantage.<param>. A layer that names another estimator starts the "
                                   "section afresh.")
    eps_low: float = _f(0.2, "Lower clip range of the importance ratio.")
    eps_high: float = _f(0.28, "Upper clip range (clip-higher).")
    dual_clip_c: float = _f(10.0, "Dual-clip constant for negative advantages.")
    overlong_buffer_len: int = _f(16, "L_buf: soft overlong penalty ramps over the last L_buf tokens.")
    overlong_penalty_factor: float = _f(1.0, "Penalty at L_max.")
    overlong_filtering: bool = _f(False, "Mask truncated responses out of the loss instead.")
    dynamic_sampling: bool = _f(True, "Drop groups whose rewards are all equal; refill the batch.")
    max_num_gen_batches: int = _f(4, "Most generation rounds to fill one batch with dynamic sampling.")
    ratio_reference: str = _f("auto", "PPO ratio against 'behaviour' log-probs (the rollout engine's; "
                                      "standard DAPO, exact only on-policy with matching numerics) or 'proximal' "
                                      "(the learner's own log-probs at the start of the step, with truncated IS "
                                      "from behaviour to proximal: the decoupled objective). 'auto' (default) "
                                      "resolves when the config is loaded: 'proximal' if max_staleness >= 1 or "
                                      "model.dtype != learner.dtype, else 'behaviour'. 'behaviour' with differing "
                                      "dtypes is refused.")
    tis_cap: float = _f(2.0, "Truncated importance-sampling cap (ratio_reference='proximal').")
    solution_anchor: float = _f(0.0, "Likelihood weight of a step's anchor tokens: the tokens a sequence marks in "
                                     "`anchor_mask` (loss mask 0: the DAPO loss does not train them), such as the "
                                     "part of a response its response form wrote greedily, or the extra training "
                                     "sequences a model's step hook adds after the step's prompts "
                                     "(driver/models/registry.py `extra_rows`). Their mean negative log-likelihood "
                                     "under the policy, times this weight, is added to the loss (label-free, as "
                                     "PPO-ptx mixes pretraining data), so the weights keep what those tokens "
                                     "teach. A general hook for any model; the embedded tiny recipe's "
                                     "pick-then-point solution and tiny.anchor_corpus_rows use it. 0 = off.")


@dataclass
class WeightSyncConfig:
    """Learner -> rollout engines weight broadcast."""
    transport: Dict[str, Any] = _f({"name": "object_store"}, "How the weights move, one section: "
                                   "weight_sync.transport.name is " + transports_help() + " The section's other "
                                   "keys are the transport's params (object_store and ipc: bucket_mb), checked "
                                   "before any actor starts (core/weight_transports.py, docs/rollout.md).")
    timeout_s: float = _f(0.0, "Deadline for one whole sync. 0 (default): derived, the drain deadline (in-flight "
                               "generation finishing at rollout.min_decode_tokens_per_s) plus transfer_timeout_s "
                               "(core/deadlines.py; the run's config.yaml records the value); > 0: used as it is.")
    transfer_timeout_s: float = _f(120.0, "The part of a derived sync deadline for moving and loading the weights "
                                          "(after the drain).")
    check_every: int = _f(0, "After every this many weight syncs, one response the step trained is scored by every "
                             "engine and by the learner (temperature-1 log-probs; driver/sync_check.py): the largest "
                             "difference is the step's `sync/logprob_max_abs_diff`, and above check_tolerance the "
                             "run stops (the engines would sample from other weights than the ones trained). 0: off.")
    check_tolerance: float = _f(1e-3, "Largest log-prob difference between an engine and the learner after a sync "
                                      "(check_every); fp32 on CPU agreed to 5e-5 (SmolLM2-135M), bf16 is not "
                                      "measured.")


@dataclass
class ClusterConfig:
    """Where the run executes."""
    address: str = _f("", "'' starts a local Ray instance (or joins $RAY_ADDRESS when set, as inside `ray job submit`); "
                           "'auto' or 'ray://host:port' joins a cluster.")
    num_cpus: Optional[int] = _f(None, "CPUs of a local Ray instance (default: all).")
    placement_strategy: str = _f("PACK", "Placement-group strategy: PACK, SPREAD, STRICT_PACK.")
    placement_timeout_s: float = _f(60.0, "How long to wait for resources before failing clearly.")
    actor_start_timeout_s: float = _f(1200.0, "How long every actor may take to start (engine load, process "
                                              "groups, first-use compilation) before the run fails clearly.")
    topology: str = _f("", "Node types the cluster has or can scale to (a name in cluster/topologies/ or a "
                           "YAML path): placement is checked against them before any actor starts, --plan "
                           "lays the run out on them, cluster.kuberay.generate builds manifests from them. "
                           "'': the nodes of the running cluster (or this machine).")
    learner_node_resource: str = _f("", "Custom resource that pins learner ranks to the nodes offering it "
                                        "(each rank's bundle asks for 0.001 of it); '': anywhere.")
    rollout_node_resource: str = _f("", "Custom resource that pins rollout engines (see learner_node_resource).")
    verifier_node_resource: str = _f("", "Custom resource that pins verifier actors (see learner_node_resource).")
    dry_run: bool = _f(False, "Print the placement plan (actor -> node type, resources, placement-group "
                              "bundles) and exit without starting anything (same as --plan).")


@dataclass
class CurriculumConfig:
    """A curriculum over the number of candidates per prompt, driven by the training reward
    (driver/curriculum.py): train on 2 candidates first, admit one more each time the policy samples
    `advance_gain` better than random@N at the newest size, averaged over `window` steps."""
    enabled: bool = _f(False, "Train on a growing number of candidates (off: every training prompt from step 1).")
    start_candidates: int = _f(2, "Most candidates per prompt in the first stage.")
    advance_gain: float = _f(0.15, "Admit the next size when mean (sampled reward - random@N) at the current "
                                   "largest size reaches this, over `window` steps.")
    window: int = _f(5, "Steps the gain is averaged over.")
    max_candidates: int = _f(0, "Most candidates per prompt of the last stage (0: the data's largest). With 2, RL "
                                "trains on pairs only while the evaluation keeps every size.")
    mirror: bool = _f(False, "Draw each prompt with its twin, the same candidates in reverse order (id "
                             "`{prompt_id}/mirror`), into the same batch: a push towards an index cancels within "
                             "the batch and only a push towards content is left (BENCHMARKS.md).")


@dataclass
class ServeConfig:
    """The Ray Serve selection service (driver/serve.py, actors/serving/selector_server.py; docs/serving.md)."""
    live: bool = _f(False, "Training only: start the selection service beside the trainer; every new policy "
                           "version is pushed into its replicas (answers carry policy_version).")
    host: str = _f("127.0.0.1", "HTTP address of Serve's proxy ('0.0.0.0' to listen on every interface).")
    port: int = _f(8000, "HTTP port of Serve's proxy.")
    app_name: str = _f("genselect-selector", "Serve application name (also names the weight board actor).")
    min_replicas: int = _f(1, "autoscaling_config.min_replicas.")
    max_replicas: int = _f(1, "autoscaling_config.max_replicas (each replica is one vLLM engine).")
    target_ongoing_requests: float = _f(16.0, "autoscaling_config.target_ongoing_requests per replica (the engine "
                                              "batches them: keep it well above 1).")
    upscale_delay_s: float = _f(10.0, "autoscaling_config.upscale_delay_s.")
    downscale_delay_s: float = _f(300.0, "autoscaling_config.downscale_delay_s.")
    look_back_period_s: float = _f(30.0, "autoscaling_config.look_back_period_s (window the load is averaged over).")
    max_ongoing_requests: int = _f(64, "Requests one replica accepts at once (Serve's default 5 serialises the "
                                       "engine's continuous batching).")
    num_cpus: float = _f(1.0, "CPUs reserved per replica.")
    num_gpus: float = _f(0.0, "GPUs reserved per replica.")
    window: int = _f(0, "Most candidates in one selection prompt; more are selected by knockout. "
                        "0: the model's run decides: its eval_knockout_window when its final "
                        "evaluation scored at least as well by knockout, else its data.max_candidates.")
    orders: int = _f(0, "Default reading of a selection group: 1 (sampled judgments), 2 (read as given and reversed "
                        "from the log-prob of every index); 0: the model's run decides: 2 when it served its knockout "
                        "window and evaluated it with eval_knockout_both_orders, else 1. A request's `orders` wins.")
    selection: str = _f("", "Default selection procedure of /v1/select: 'knockout' or 'round_robin' (every pair in "
                            "both orders, wins pooled by the request's `answers`); '': the model's run decides: "
                            "round_robin when it evaluated eval_round_robin and its final round robin scored at least "
                            "as well as its knockout and its direct reading, else knockout. A request's `selection` wins.")
    max_round_robin_candidates: int = _f(32, "Most candidates a round-robin request may send (N (N - 1) one-token "
                                             "judgments; 413 above).")
    max_prompt_tokens: int = _f(0, "Prompt token budget of one selection prompt (0: the training "
                                   "data.max_prompt_tokens).")
    max_response_tokens: int = _f(0, "Longest judgment (0: the training rollout.max_response_tokens).")
    max_candidates: int = _f(256, "Most candidates one /v1/select request may send (413 above).")
    max_candidate_chars: int = _f(0, "Longest candidate in characters (0: the training data.max_candidate_chars).")
    max_problem_chars: int = _f(16000, "Longest problem statement in characters.")
    max_samples: int = _f(16, "Largest `samples` (judgments per group) a request may ask for.")
    max_body_bytes: int = _f(4 << 20, "Largest request body in bytes (413 above).")
    max_completion_tokens: int = _f(512, "Largest max_tokens of a /v1/completions request.")
    reasoning_parser: str = _f("", "vLLM reasoning parser (e.g. 'deepseek_r1', 'qwen3'; vLLM's ReasoningParserManager "
                                   "names them) that splits a chat answer's thinking into `reasoning_content`, "
                                   "streamed or not; '': none, the whole answer is `content`.")
    request_timeout_s: float = _f(120.0, "Deadline of one engine call inside a request (504 past it).")
    admin_token: str = _f("", "When set, /admin/* requires 'Authorization: Bearer <token>'.")
    access_log: bool = _f(False, "Serve's per-request access log line (costs throughput on small CPU machines; "
                                 "/healthz counts requests either way).")


@dataclass
class LoggingConfig:
    """Where a run's metrics go besides `run_dir/metrics.jsonl` (driver/trackers.py; docs/running.md)."""
    backends: list = _f(["tensorboard"], "Metric backends, any of 'tensorboard' (run_dir/tensorboard/), 'wandb' "
                                         "(Weights & Biases) and 'mlflow' (MLflow): each gets every scalar the run "
                                         "logs with its step, and W&B and MLflow the resolved config once "
                                         "(flattened). A resumed run continues the same W&B and MLflow run "
                                         "(their ids are kept in run_dir/trackers.json). []: metrics.jsonl only.")
    project: str = _f("genselect-rl", "W&B project and MLflow experiment the run is logged under.")
    run_name: str = _f("", "Display name of the W&B and MLflow run ('': the run folder's name).")
    wandb_mode: str = _f("", "W&B mode: 'online', 'offline' (written under run_dir/wandb/, `wandb sync` uploads "
                             "it later) or '' (W&B's own setting: WANDB_MODE, else online).")
    mlflow_tracking_uri: str = _f("", "MLflow tracking URI (a server's http(s):// address, or a local folder). "
                                      "'': an MLflow file store in run_dir/mlruns (`mlflow ui --backend-store-uri "
                                      "run_dir/mlruns` shows it).")


@dataclass
class TrainConfig:
    """The main job: asynchronous DAPO training of a GenSelect selector."""
    task: str = _f("selector", "What the policy learns: 'selector' (GenSelect: pick the best of N candidates) or "
                               "'generator' (write solutions to the problems of data.source, rewarded by the "
                               "verifier pool; advantages from algorithm.advantage; docs/generator.md).")
    run_dir: str = _f("runs/default", "Output folder: checkpoints, metrics, curves, summary, export.")
    seed: int = _f(0, "Global seed (data order, sampling seeds).")
    steps: int = _f(60, "Learner steps.")
    prompts_per_step: int = _f(16, "Groups (prompts) per training batch.")
    max_staleness: int = _f(1, "Samples from policy version v train at version t iff t - v <= this; "
                               "0 = strictly synchronous on-policy.")
    eval_every: int = _f(10, "Evaluate on the held-out set every this many steps (0: start and end only).")
    eval_prompts: int = _f(200, "Held-out prompts per evaluation (0: all): the validation set, the first prompts of "
                                "the held-out split.")
    eval_test_prompts: int = _f(0, "Prompts of a test set read at the start and the end only: held-out prompts of "
                                   "problems the validation set does not hold (driver/eval_sets.py); 0: no test set.")
    eval_samples: int = _f(4, "Temperature-1 responses per held-out prompt for the sampled accuracy (0: off). "
                               "task=generator: K, the solutions sampled per held-out problem for pass@1..pass@K "
                               "(at rollout.temperature; >= 2).")
    eval_knockout_window: int = _f(0, "Also evaluate the selector by a knockout tournament of groups of at most this "
                                      "many candidates (2: pairs; the serving rule for N beyond the window); 0: off.")
    eval_knockout_both_orders: bool = _f(False, "Knockout evaluation: judge each group as given and reversed, from "
                                                "the log-probs of every index, and advance the candidate with the "
                                                "higher sum (a position preference cancels; needs "
                                                "rollout.constrain_index). Twice the judgments.")
    eval_round_robin: str = _f("none", "Also evaluate the selector by a round robin of pairs, each read in both orders "
                                   "(core/algo/round_robin.py): 'answer' pools the wins by final answer (a selector "
                                   "at chance then picks majority voting's answer), 'candidate' scores candidates "
                                   "alone; 'none': not. N (N - 1) one-token judgments a prompt; needs "
                                   "rollout.constrain_index.")
    eval_without_cue: bool = _f(True, "With a hedge cue in the data: also evaluate (at the start and the end) on "
                                      "the test set's prompts (the validation set's without one) with the hedging "
                                      "sentences taken out of their candidates.")
    eval_without_cue_every: int = _f(0, "The no-cue evaluation also at every evaluation whose step is a multiple of "
                                        "this (0: start and end only; each costs ~20 s on the default).")
    eval_ood_tasks: list = _f([],
                              "reasoning-gym tasks (e.g. [chain_sum, products]) whose problems make an out-of-"
                              "distribution held-out set read at the start and the end: candidates and prompts "
                              "built as data.* says (data.source=reasoning_gym with these tasks, driver/eval_sets.py); "
                              "[]: none.")
    eval_ood_prompts: int = _f(200, "Prompts of the out-of-distribution set (eval_ood_tasks).")
    eval_without_cue_at_start: bool = _f(True, "Read the no-cue held-out set at step 0 too (false: from the first "
                                               "evaluation after it).")
    checkpoint_every: int = _f(10, "Write an atomic checkpoint every this many steps (0: only after the last "
                                   "step).")
    export_every: int = _f(0, "Also write the policy as a Hugging Face folder every this many steps, atomically, into "
                              "run_dir/exports/step_NNNNNN/ (0: only run_dir/export at the end). Any checkpoint "
                              "exports later too: python -m driver.export RUN_DIR --step N.")
    keep_checkpoints: int = _f(2, "Checkpoints kept on disk.")
    resume: str = _f("auto", "'auto' (continue the run in run_dir if any), 'never', or a checkpoint path.")
    progress: bool = _f(True, "Show a live progress bar.")
    model: ModelConfig = _f(ModelConfig(), "Selector model.")
    data: DataConfig = _f(DataConfig(), "Data and selection-task synthesis.")
    rollout: RolloutConfig = _f(RolloutConfig(), "Rollout workers.")
    verifier: VerifierConfig = _f(VerifierConfig(), "Verifier pool.")
    learner: LearnerConfig = _f(LearnerConfig(), "Learner.")
    algorithm: AlgorithmConfig = _f(AlgorithmConfig(), "RL objective.")
    weight_sync: WeightSyncConfig = _f(WeightSyncConfig(), "Weight sync.")
    cluster: ClusterConfig = _f(ClusterConfig(), "Ray cluster and placement.")
    curriculum: CurriculumConfig = _f(CurriculumConfig(), "Candidate-count curriculum.")
    serve: ServeConfig = _f(ServeConfig(), "Selection service (serve.live: beside the training run).")
    logging: LoggingConfig = _f(LoggingConfig(), "Metric backends besides metrics.jsonl (TensorBoard, W&B, MLflow).")
    tiny: Any = field(default_factory=recipe_section("tiny"),
                      metadata={"help": "The embedded tiny recipe's own keys (tiny_recipe/config.py; empty when the "
                                        "recipe package does not import)."})
