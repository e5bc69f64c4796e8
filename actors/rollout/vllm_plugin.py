"""vLLM general plugin (entry point `vllm.general_plugins`, pyproject.toml): engine processes die with
the rollout actor that started them.

vLLM's engine core process does not notice its front-end process dying: when a rollout actor is killed
(SIGKILL of the driver's process tree, `ray.kill`, the Ray memory monitor), the engine core and its worker
are re-parented and live on, each holding gigabytes of memory, CPU threads and /dev/shm segments, and
slowing or starving every later engine on the machine (measured: an orphaned engine pair of the smoke model
held 2.4 GB RSS for as long as the machine ran, and a later run's engine start-up hung behind it).

vLLM loads general plugins in every process it starts (front end, engine core, workers). `RolloutWorker`
sets `GENSELECT_VLLM_OWNER_PID` to its own pid before it creates its engine; in every *other* process that
inherits the variable, `die_with_parent` starts a daemon thread (`core.lifetime.start_parent_watch`) that
exits the process (SIGKILL of itself) as soon as its parent process is gone (its parent pid changes). The
worker process already dies with the engine core through vLLM's own death pipe; the watch covers it too.
Without the variable it does nothing.
"""
from __future__ import annotations

import os

from core.lifetime import start_parent_watch

OWNER_ENV = "GENSELECT_VLLM_OWNER_PID"


def die_with_parent() -> None:
    """vLLM plugin entry point: watch the parent process in engine processes spawned by a rollout actor."""
    owner = os.environ.get(OWNER_ENV, "")
    if not owner.isdigit() or int(owner) == os.getpid():
        return
    start_parent_watch(os.getppid())
