"""Evidence for timing TensorRT-LLM's gated block-fp8 fused MoE from another engine's table.

TensorRT-LLM's measured MoE tables on Hopper hold only Nemotron's non-gated kernel, so a gated
block-fp8 MoE (DeepSeek-V3/R1, Qwen3-*-FP8) of this engine is the fitted model's extrapolation.
Other engines measured the exact shapes. This prints, for a model's fused-MoE shape on one GPU:

1. ``fits``: the fused-MoE time per layer (ms) each engine's calibrated kernel model gives at
   the shape, per expert layout (moe_tp x EP) and token count, with the engine whose table
   answered and whether the query was extrapolated (``*``); TensorRT-LLM's row is what the
   serving replay uses;
2. ``measured``: the median measured latency per kernel source at the exact shape (routing
   ``power_law_1.01``, the calibration's default skew), where a table has it;
3. ``shared shapes``: on the shapes where TensorRT-LLM *and* another engine were measured
   (same dtype, expert configuration, layout, routing, tokens), the median ratio other /
   TensorRT-LLM at decode (<= 64 tokens) and prefill (>= 1,024 tokens) sizes: how far another
   engine's kernel is from TensorRT-LLM's own where both exist.

    python -m llmplan.calibration.trtllm_moe_evidence --measurements ../shared/measurements \\
        --gpu h200_sxm --model deepseek-ai/DeepSeek-V3

The findings (docs/ACCURACY.md, "TensorRT-LLM rows (2026-11-24 late)") decided against a
stand-in: the tables of the other engines move DeepSeek's rows one way and Qwen3-235B's the other.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from llmplan.errors import EXIT_USER_ERROR, UserError

#: token counts printed for the fitted models (decode to prefill sizes)
TOKENS = (1, 4, 16, 64, 256, 1024, 8192)
#: expert layouts (moe_tp, ep) printed
LAYOUTS = ((8, 1), (1, 8), (4, 1), (1, 4))
#: routing distribution of the measured medians (the calibration's default skew 1.01)
DISTRIBUTION = "power_law_1.01"
#: token ranges of the shared-shape ratios
DECODE_MAX_TOKENS = 64
PREFILL_MIN_TOKENS = 1024
_SHAPE = ["moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size",
          "distribution", "num_tokens"]


def moe_table(measurements: str | Path, gpu: str) -> pd.DataFrame:
    """The raw ``moe.csv.gz`` (or ``.csv``) of one GPU folder."""
    folder = Path(measurements) / gpu
    for name in ("moe.csv.gz", "moe.csv"):
        if (folder / name).is_file():
            return pd.read_csv(folder / name)
    raise UserError(f"no moe table under '{folder}'", key="measurements",
                    fix="pass --measurements DIR holding DIR/<gpu>/moe.csv.gz and a --gpu folder name")


def shared_shape_ratios(df: pd.DataFrame, reference: str = "trtllm") -> pd.DataFrame:
    """Median ratio (other kernel source / ``reference`` engine) over the shapes both measured,
    per kernel source and dtype: all tokens, <= :data:`DECODE_MAX_TOKENS`, >= :data:`PREFILL_MIN_TOKENS`."""
    ref = df[df["backend"] == reference].groupby(_SHAPE)["latency_ms"].median().rename("ref")
    rows = []
    for (backend, source), part in df[df["backend"] != reference].groupby(["backend", "kernel_source"], sort=True):
        other = part.groupby(_SHAPE)["latency_ms"].median().rename("other")
        both = pd.concat([ref, other], axis=1, join="inner").reset_index()
        if both.empty:
            continue
        both["ratio"] = both["other"] / both["ref"]
        for dtype, g in both.groupby("moe_dtype", sort=True):
            dec, pre = g[g["num_tokens"] <= DECODE_MAX_TOKENS], g[g["num_tokens"] >= PREFILL_MIN_TOKENS]
            rows.append({"backend": backend, "kernel_source": source, "dtype": dtype, "shapes": len(g),
                         "ratio_all": float(g["ratio"].median()),
                         "ratio_decode": float(dec["ratio"].median()) if len(dec) else np.nan,
                         "ratio_prefill": float(pre["ratio"].median()) if len(pre) else np.nan})
    return pd.DataFrame(rows, columns=["backend", "kernel_source", "dtype", "shapes", "ratio_all", "ratio_decode",
                                       "ratio_prefill"])


def measured_at_shape(df: pd.DataFrame, hidden: int, inter: int, topk: int, experts: int,
                      dtype: str = "fp8_block") -> pd.DataFrame:
    """Median measured ms per (kernel source, moe_tp, EP, tokens) at one expert shape, for the
    layouts of :data:`LAYOUTS`."""
    sel = df[(df["hidden_size"] == hidden) & (df["inter_size"] == inter) & (df["topk"] == topk)
             & (df["num_experts"] == experts) & (df["moe_dtype"] == dtype) & (df["distribution"] == DISTRIBUTION)
             & df["num_tokens"].isin(TOKENS)]
    keep = pd.Series(list(zip(sel["moe_tp_size"], sel["moe_ep_size"])), index=sel.index).isin(LAYOUTS)
    sel = sel[keep]
    if sel.empty:
        return pd.DataFrame(columns=["kernel_source", "moe_tp_size", "moe_ep_size", *TOKENS])
    out = sel.pivot_table(index=["kernel_source", "moe_tp_size", "moe_ep_size"], columns="num_tokens",
                          values="latency_ms", aggfunc="median")
    return out.reset_index()


def fitted_at_shape(gpu_key: str, hidden: int, inter: int, topk: int, experts: int,
                    engines: tuple[str, ...] = ("trtllm", "sglang", "vllm"), dtype: str = "fp8") -> pd.DataFrame:
    """Per engine and layout: the calibrated kernel model's fused-MoE ms at :data:`TOKENS`,
    the engine whose table answered and whether any query was extrapolated."""
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.sim.calibrated import kernel_model_for

    gpu = get_gpu(gpu_key)
    rows = []
    for engine in engines:
        km = kernel_model_for(gpu, engine)
        for tp, ep in LAYOUTS:
            times = [km.moe(t, hidden, inter, topk, experts, tp, ep, dtype) for t in TOKENS]
            tables = "/".join(sorted({k.table for k in times if k.table})) or "-"
            rows.append({"engine": engine, "moe_tp": tp, "ep": ep, "table": tables,
                         "extrapolated": any(k.extrapolated for k in times),
                         **{t: k.latency_ms for t, k in zip(TOKENS, times)}})
    return pd.DataFrame(rows)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m llmplan.calibration.trtllm_moe_evidence", description=__doc__.split("\n")[0])
    p.add_argument("--measurements", required=True, help="folder with one sub-folder per GPU")
    p.add_argument("--gpu", default="h200_sxm", help="GPU folder (and catalog key), e.g. h200_sxm")
    p.add_argument("--model", default="deepseek-ai/DeepSeek-V3", help="catalog model whose MoE shape is shown")
    return p


def main(argv: list[str]) -> int:
    a = build_parser().parse_args(argv)
    try:
        from llmplan.model_catalog.loader import load_model

        model = load_model(a.model)
        if model.moe is None:
            raise UserError(f"model '{a.model}' has no MoE layers", key="--model", fix="pick an MoE model")
        e = model.moe
        shape = (model.hidden_size, e.expert_intermediate_size, e.top_k, e.num_experts)
        df = moe_table(a.measurements, a.gpu)
    except UserError as exc:
        print(exc.render(), file=sys.stderr)   # the key and the fix too, as every other tool
        return EXIT_USER_ERROR
    pd.set_option("display.width", 200)
    print(f"{a.model} fused MoE (hidden {shape[0]}, inter {shape[1]}, top-{shape[2]} of {shape[3]}) on {a.gpu}, ms per layer")
    print("\nfits (calibrated kernel model, fp8 query; extrapolated = some token count outside the fitted range):")
    print(fitted_at_shape(a.gpu, *shape).round(4).to_string(index=False))
    print(f"\nmeasured at this shape (fp8_block, {DISTRIBUTION}):")
    meas = measured_at_shape(df, *shape)
    print(meas.round(4).to_string(index=False) if len(meas) else "  none")
    print("\nshared shapes: median other / TensorRT-LLM where both engines measured the same shape:")
    ratios = shared_shape_ratios(df)
    print(ratios.round(2).to_string(index=False) if len(ratios) else "  none")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
