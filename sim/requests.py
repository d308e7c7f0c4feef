"""What the simulator is offered: requests, a workload of them, and where bundled data lives.

The bottom of the workload layer: :mod:`llmplan.sim.traces` (trace files) and
:mod:`llmplan.sim.workload` (synthetic generation) both build these.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from llmplan.errors import UserError

#: bundled workload data (presets, sample traces)
DATA_DIR = Path(__file__).resolve().parent / "data"

#: default prefix-block size (tokens per hash id) for synthetic shared prefixes
SYNTHETIC_PREFIX_BLOCK_TOKENS = 64


@dataclass(frozen=True, slots=True)
class Request:
    """One request as offered to the system (inputs only; results live in metrics)."""

    arrival_ms: float          # open loop: arrival time; closed loop: ignored
    input_tokens: int          # prompt length, tokens
    output_tokens: int         # tokens to generate (>= 1)
    hash_ids: tuple[int, ...] = ()  # identities of the prompt's leading blocks (prefix sharing)


@dataclass
class Workload:
    """Requests plus how they are offered. ``closed_loop_concurrency`` None means open loop."""

    requests: list[Request]
    prefix_block_tokens: int = SYNTHETIC_PREFIX_BLOCK_TOKENS  # tokens per entry of hash_ids
    closed_loop_concurrency: Optional[int] = None
    think_time_ms: float = 0.0
    name: str = ""
    offline: bool = False      # all requests queued at time 0: no arrival rate, no overload, no deadline

    @property
    def horizon_ms(self) -> float:
        """Last arrival time (0 for closed loop)."""
        if self.closed_loop_concurrency is not None or not self.requests:
            return 0.0
        return self.requests[-1].arrival_ms


def resolve_data_path(path: str, key: str) -> Path:
    """A user path as given, else relative to ``sim/data/``; UserError when neither exists."""
    p = Path(path).expanduser()
    if p.exists():
        return p
    q = DATA_DIR / path
    if not p.is_absolute() and q.exists():
        return q
    raise UserError(f"file not found: {path}", key=key, fix=f"give an existing path (also searched {DATA_DIR})")
