"""Speculative-decoding settings of a launch command, per engine, from the plan's choice.

The planner (optimizer/spec_candidates.py) chooses a method (``mtp`` | ``eagle3`` |
``draft_model``), the draft length k, and for EAGLE trees ``topk`` and the verify width.
Each function below returns only what the engine's documentation names for that choice, and
a note (never a guessed flag) where the engine cannot express it.

Documentation read:
  * vLLM v0.12.0 speculative decoding, https://docs.vllm.ai/en/v0.12.0/features/spec_decode/ :
    ``--speculative-config`` takes a JSON object ``{"method", "model", "num_speculative_tokens"}``;
    the methods (``SpeculativeMethod``: ``eagle3``, ``draft_model``, ``mtp``, ...) are listed in
    https://docs.vllm.ai/en/v0.11.0/api/vllm/config/speculative.html . vLLM drafts a chain
    (no EAGLE tree) and is not compatible with pipeline parallelism (same page).
  * SGLang speculative decoding (v0.5.x), https://docs.sglang.io/advanced_features/speculative_decoding.html :
    ``--speculative-algorithm EAGLE3 | NEXTN | STANDALONE``, ``--speculative-draft-model-path``,
    ``--speculative-num-steps`` (draft depth), ``--speculative-eagle-topk`` (branching),
    ``--speculative-num-draft-tokens`` (verify width). NEXTN reads the MTP modules from the
    target checkpoint (no draft path).
  * TensorRT-LLM 1.0.0, https://nvidia.github.io/TensorRT-LLM/1.0.0/examples/llm_speculative_decoding.html :
    the LLM-API ``speculative_config`` (``decoding_type: MTP`` with ``num_nextn_predict_layers``;
    ``decoding_type: Eagle`` with ``max_draft_len``, ``speculative_model_dir``,
    ``eagle3_one_model``), written into the extra LLM-API options YAML. That page has no
    draft/target example for 1.0.0, so a separate draft model gets a note, not a flag.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

#: published EAGLE-3 heads, by target checkpoint (the heads used in the engines' own EAGLE-3
#: examples: vLLM / TensorRT-LLM 1.0.0 docs above, yuhuili/EAGLE3-* on Hugging Face)
EAGLE3_HEADS = {
    "meta-llama/Llama-3.1-8B-Instruct": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "meta-llama/Llama-3.3-70B-Instruct": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
}
#: what the command names when no published head is known: the engine fails at start, loudly
EAGLE3_PLACEHOLDER = "<EAGLE-3 head of {model}>"


@dataclass(frozen=True)
class SpecLaunch:
    """The plan's speculation setting of one pool, as the engines need it."""

    method: str                 # mtp | eagle3 | draft_model
    k: int                      # draft tokens per step (depth of the draft)
    topk: int = 1               # EAGLE tree branching (1: a chain)
    verify_tokens: int = 0      # query tokens per sequence in the verify step (k + 1 for a chain)
    draft_hf_id: Optional[str] = None   # draft_model: the draft checkpoint; eagle3: the head (None: unknown)
    mtp_modules: int = 0        # mtp: the MTP modules the checkpoint ships (num_nextn_predict_layers)

    @property
    def is_tree(self) -> bool:
        return self.topk > 1


def from_candidate(cand, target_hf_id: str, mtp_modules: int = 0) -> Optional[SpecLaunch]:
    """The setting of a planned candidate (None: speculation off)."""
    s = getattr(cand, "spec", None)
    if s is None or s.k < 1:
        return None
    draft = s.draft.hf_id if s.method == "draft_model" and s.draft is not None else None
    if s.method == "eagle3":
        draft = EAGLE3_HEADS.get(target_hf_id)
    return SpecLaunch(s.method, int(s.k), int(s.topk), int(s.verify_width), draft,
                      int(mtp_modules) if s.method == "mtp" else 0)


def _draft_path(sp: SpecLaunch, model_hf_id: str) -> tuple[str, list[str]]:
    if sp.draft_hf_id:
        return sp.draft_hf_id, []
    name = EAGLE3_PLACEHOLDER.format(model=model_hf_id)
    near = EAGLE3_HEADS.get(model_hf_id + "-Instruct")
    hint = f" ({near} is published for {model_hf_id}-Instruct, not for this checkpoint)" if near else ""
    return name, [f"WARNING: no published EAGLE-3 head is known for {model_hf_id}{hint}: replace '{name}' with the "
                  "head you trained or chose; the plan's acceptance rates assume a head of EAGLE-3 quality"]


def _chain_note(sp: SpecLaunch, engine: str) -> list[str]:
    if not sp.is_tree:
        return []
    return [f"WARNING: {engine} drafts a chain; the plan chose an EAGLE tree (topk {sp.topk}, "
            f"{sp.verify_tokens} verify tokens) that it cannot express: the command drafts a chain of "
            f"{sp.k} tokens, whose speed the plan did not verify; re-plan with speculative.topk=1 or use SGLang"]


def describe(sp: SpecLaunch) -> str:
    tree = f", tree topk {sp.topk} with {sp.verify_tokens} verify tokens" if sp.is_tree else ""
    draft = f", draft {sp.draft_hf_id}" if sp.draft_hf_id else ""
    reuse = (f"; k exceeds the checkpoint's {sp.mtp_modules} MTP module(s): the plan priced the last module "
             "reused for the further draft tokens, as vLLM and SGLang do; check that your engine version does"
             if sp.method == "mtp" and 0 < sp.mtp_modules < sp.k else "")
    return f"speculative decoding: {sp.method}, k = {sp.k} draft tokens per step{tree}{draft} (chosen by the plan){reuse}"


def vllm_args(sp: Optional[SpecLaunch], model_hf_id: str) -> tuple[list[str], list[str]]:
    """(args, notes) for `vllm serve`: one ``--speculative-config`` JSON object."""
    if sp is None:
        return [], []
    cfg: dict = {"method": sp.method, "num_speculative_tokens": sp.k}
    notes = [describe(sp)]
    if sp.method in ("eagle3", "draft_model"):
        path, more = _draft_path(sp, model_hf_id)
        cfg["model"] = path
        notes += more
    notes += _chain_note(sp, "vLLM")
    return ["--speculative-config", json.dumps(cfg, sort_keys=True)], notes


_SGLANG_ALGORITHM = {"eagle3": "EAGLE3", "mtp": "NEXTN", "draft_model": "STANDALONE"}


def sglang_args(sp: Optional[SpecLaunch], model_hf_id: str) -> tuple[list[str], list[str]]:
    """(args, notes) for `sglang.launch_server` (trees are native to SGLang's EAGLE)."""
    if sp is None:
        return [], []
    args = ["--speculative-algorithm", _SGLANG_ALGORITHM[sp.method]]
    notes = [describe(sp)]
    if sp.method != "mtp":
        path, more = _draft_path(sp, model_hf_id)
        args += ["--speculative-draft-model-path", path]
        notes += more
    args += ["--speculative-num-steps", str(sp.k), "--speculative-eagle-topk", str(sp.topk),
             "--speculative-num-draft-tokens", str(sp.verify_tokens)]
    return args, notes


def trtllm_options(sp: Optional[SpecLaunch], model_hf_id: str) -> tuple[dict, list[str]]:
    """(``speculative_config`` options-file entry or {}, notes) for TensorRT-LLM 1.0.0."""
    if sp is None:
        return {}, []
    notes = [describe(sp)]
    if sp.method == "mtp":
        return {"speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": sp.k}}, notes
    if sp.method == "eagle3":
        path, more = _draft_path(sp, model_hf_id)
        cfg = {"decoding_type": "Eagle", "max_draft_len": sp.k, "speculative_model_dir": path,
               "eagle3_one_model": True}
        return {"speculative_config": cfg}, notes + more + _chain_note(sp, "TensorRT-LLM")
    return {}, notes + [f"WARNING: the plan chose a separate draft model ({sp.draft_hf_id}) and the TensorRT-LLM "
                        "1.0.0 documentation read here gives no trtllm-serve option for it: no speculation is "
                        "configured, so this pool decodes slower than planned; use vLLM or SGLang, or re-plan with "
                        "speculative.method=off"]
