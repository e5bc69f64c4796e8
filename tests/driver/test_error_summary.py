"""`driver.failure.error_summary`: a failed actor start-up names the exception that killed the actor (Ray's own
message says only "died because of an error raised in its creation task", and the actor logs may be gone)."""
from pathlib import Path

import pytest

from driver.failure import error_summary

ROOT = Path(__file__).resolve().parent.parent.parent


def test_one_line_error_is_kept_as_is():
    assert error_summary(TimeoutError("Get timed out: some object(s) not ready.")) == \
        "TimeoutError: Get timed out: some object(s) not ready."


def test_traceback_text_adds_its_last_line_as_the_cause():
    err = RuntimeError("The actor died because of an error raised in its creation task, ray::Learner.__init__()\n"
                       "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n\n"
                       "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
                       "local network address. port: 41234\n")
    text = error_summary(err, limit=120)
    assert text.startswith("RuntimeError: The actor died because of an error raised in its creation task")
    assert text.endswith("caused by torch.distributed.DistNetworkError: The server socket has failed to listen on "
                         "any local network address. port: 41234"[:len("caused by ") + 120])


@pytest.mark.slow
def test_real_actor_dying_in_init_names_its_exception():
    ray = pytest.importorskip("ray")

    class Broken:
        def __init__(self):
            raise ValueError("no model at /nowhere")

        def ping(self):
            return 1

    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR",
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        actor = ray.remote(num_cpus=0)(Broken).remote()
        with pytest.raises(ray.exceptions.RayActorError) as caught:
            ray.get(actor.ping.remote(), timeout=120)
        text = error_summary(caught.value)
        assert text.startswith("ActorDiedError: ")
        assert text.endswith("caused by ValueError: no model at /nowhere"), text
    finally:
        ray.shutdown()
