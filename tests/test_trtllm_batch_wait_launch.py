"""A plan that simulated TensorRT-LLM batch waiting writes the same options into the launch file
(extra_llm_api_options.yaml), so the engine started is the engine simulated; off (the default)
writes nothing."""

import yaml

from llmplan.optimizer.launch import trtllm
from test_artifacts import _spec


def _opts(**kw):
    cmd = trtllm.command(_spec(engine="trtllm", **kw))
    [(_, text)] = cmd.files
    return yaml.safe_load(text), cmd.notes


def test_batch_waiting_reaches_the_options_file():
    opts, notes = _opts(batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9)
    assert opts["batch_wait_timeout_iters"] == 20 and opts["batch_wait_max_tokens_ratio"] == 0.9
    assert any("batch waiting" in n and "1.1" in n for n in notes)   # the release that has the options


def test_default_writes_no_batch_waiting():
    opts, notes = _opts()
    assert "batch_wait_timeout_iters" not in opts and "batch_wait_max_tokens_ratio" not in opts
    assert not any("batch waiting" in n for n in notes)
