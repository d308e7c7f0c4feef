"""Train/test splits for honest validation: random rows, whole shape groups, whole GPUs.

``random:FRAC:SEED`` holds out a FRAC share of the rows; ``grouped:FRAC:SEED`` holds out a
FRAC share of the *shape groups* (every row of a held-out group goes to the test side):

* GEMM: the weight shape (n, k), across m, dtypes and engines;
* attention (prefill and decode): the head configuration (num_heads, num_kv_heads, head_dim);
* MoE: the expert configuration (hidden, inter, topk, num_experts), across tokens and sharding;
* MLA and its absorb matmuls: heads per GPU; Gated DeltaNet: the head configuration;
* collectives: message size; MoE all-to-all: (hidden, topk, num_experts).

Group membership is decided by a keyed hash of the group's value, so it is the same for
every GPU, engine and run (no dependence on row order or Python's salted ``hash``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from llmplan.errors import UserError

GROUP_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("n", "k"),
    "attention_prefill": ("num_heads", "num_kv_heads", "head_dim"),
    "attention_decode": ("num_heads", "num_kv_heads", "head_dim"),
    "moe": ("hidden", "inter", "topk", "num_experts"),
    "mla_prefill": ("num_heads",),
    "mla_decode": ("num_heads",),
    "custom_allreduce": ("message_bytes",),
    "nccl": ("message_bytes",),
    "moe_a2a": ("hidden", "topk", "num_experts"),
    "mla_bmm": ("num_heads",),
    "gdn_prefill": ("k_heads", "head_k_dim", "v_heads", "head_v_dim"),
    "gdn_decode": ("k_heads", "head_k_dim", "v_heads", "head_v_dim"),
}


@dataclass(frozen=True)
class Split:
    kind: str      # random | grouped
    frac: float    # share held out for testing
    seed: int

    def __str__(self) -> str:
        return f"{self.kind}:{self.frac:g}:{self.seed}"


def parse_split(text: str) -> Split:
    """``random:0.5:SEED`` or ``grouped:0.5:SEED`` (SEED optional, default 0)."""
    fix = "use --split random:FRAC:SEED or grouped:FRAC:SEED, e.g. grouped:0.5:0 (FRAC in (0, 1))"
    parts = str(text).split(":")
    if len(parts) not in (2, 3) or parts[0] not in ("random", "grouped"):
        raise UserError(f"bad split '{text}'", key="split", fix=fix)
    try:
        frac = float(parts[1])
        seed = int(parts[2]) if len(parts) == 3 else 0
    except ValueError as exc:
        raise UserError(f"bad split '{text}': {exc}", key="split", fix=fix) from exc
    if not 0.0 < frac < 1.0:
        raise UserError(f"bad split '{text}': fraction {frac:g} is not in (0, 1)", key="split", fix=fix)
    return Split(parts[0], frac, seed)


def _unit_hash(seed: int, key: str) -> float:
    h = hashlib.blake2b(f"{seed}|{key}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2.0 ** 64


def group_ids(family: str, df: pd.DataFrame) -> pd.Series:
    """The shape-group label of every row (a string)."""
    cols = GROUP_COLUMNS.get(family)
    if not cols:
        return pd.Series("all", index=df.index)
    parts = [df[c].map(lambda v: f"{float(v):.9g}") for c in cols]
    out = parts[0]
    for p in parts[1:]:
        out = out + "," + p
    return out


def held_out_mask(family: str, df: pd.DataFrame, split: Split) -> np.ndarray:
    """Boolean mask of the held-out (test) rows of one family's frame."""
    if split.kind == "random":
        # a keyed hash per row position keeps the mask stable for a given frame and seed
        rng = np.random.default_rng([split.seed, sum(map(ord, family))])
        return rng.random(len(df)) < split.frac
    ids = group_ids(family, df)
    uniq = ids.unique()
    held = {g for g in uniq if _unit_hash(split.seed, f"{family}|{g}") < split.frac}
    if uniq.size > 1 and not held:          # tiny tables: hold out at least one group
        held = {min(uniq, key=lambda g: _unit_hash(split.seed, f"{family}|{g}"))}
    if uniq.size > 1 and len(held) == uniq.size:
        held.discard(max(uniq, key=lambda g: _unit_hash(split.seed, f"{family}|{g}")))
    return ids.isin(held).to_numpy()
