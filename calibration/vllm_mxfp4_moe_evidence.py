"""Evidence: vLLM's Marlin MXFP4 MoE against the triton MXFP4 MoE the replay times gpt-oss with.

The InferenceX gpt-oss launches behind the vLLM 0.18 sweep rows export ``VLLM_MXFP4_USE_MARLIN=1``
(SemiAnalysisAI/InferenceX ``benchmarks/single_node/gptoss_fp4_h100.sh`` / ``_h200.sh`` at 626932a1,
2026-03-27), and vLLM's MXFP4 backend choice takes Marlin whenever that variable is set
(``get_mxfp4_backend``, vllm ``model_executor/layers/quantization/mxfp4.py``: "if
envs.VLLM_MXFP4_USE_MARLIN ... return Mxfp4Backend.MARLIN", else the OpenAI ``triton_kernels``
path on SM90-SM100). The vLLM MoE tables time the triton kernel at gpt-oss's shape
(``vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic``, hidden 2,880, 128 or 32 experts,
top-4) and Marlin MXFP4 only at another shape (``vllm_compressedtensorsw4a4mxfp4moe_marlin_...``,
hidden 3,584, inter 3,072, 896 experts, top-16). This prints, per kernel source of the vLLM
``w4a16_mxfp4`` rows at moe_tp = EP = 1, the throughput (TFLOP/s of the gated expert GEMMs) and
the routed tokens per expert at each token count, and what gpt-oss's triton time per layer
would become at Marlin's throughput of the same token count: the transfer a Marlin stand-in
would make, to be held against the served residuals (docs/ACCURACY.md, "vLLM TTFT (session 9,
round 2)"). Since session 11 the replay runs Marlin for those rows with a transfer matched on the
tokens per expert, the (moe_tp, moe_ep) layout and the routing rather than on the token count
(sim/vllm_marlin_mxfp4.py, calibration/vllm_launch.mxfp4_marlin).

    python -m llmplan.calibration.vllm_mxfp4_moe_evidence --measurements ../shared/measurements --gpu h200_sxm
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from llmplan.calibration.trtllm_moe_evidence import moe_table
from llmplan.errors import EXIT_USER_ERROR, UserError

#: the MoE dtype of vLLM's MXFP4 (weight-only 4-bit, 16-bit activations) tables
DTYPE = "w4a16_mxfp4"
#: token counts printed (decode to 8k-prompt steps)
TOKENS = (8, 64, 1024, 3072, 8192)
#: routing of the printed medians
DISTRIBUTION = "balanced"


def with_throughput(df: pd.DataFrame) -> pd.DataFrame:
    """vLLM ``w4a16_mxfp4`` rows with ``tokens_per_expert`` (routed pairs per local expert) and
    ``tflops``: the gated expert GEMMs' 6 x hidden x inter / moe_tp flops per routed pair over the
    measured time."""
    sel = df[(df["backend"] == "vllm") & (df["moe_dtype"] == DTYPE)].copy()
    pairs = sel["num_tokens"] * sel["topk"]
    sel["tokens_per_expert"] = pairs / (sel["num_experts"] / sel["moe_ep_size"])
    flops = 6.0 * sel["hidden_size"] * (sel["inter_size"] / sel["moe_tp_size"]) * pairs
    sel["tflops"] = flops / (sel["latency_ms"] * 1e9)
    return sel


def throughput_table(df: pd.DataFrame, tokens: tuple[int, ...] = TOKENS,
                     distribution: str = DISTRIBUTION) -> pd.DataFrame:
    """Median ms, tokens per expert and TFLOP/s per (kernel source, expert shape, tokens) at
    moe_tp = EP = 1."""
    sel = with_throughput(df)
    sel = sel[(sel["moe_tp_size"] == 1) & (sel["moe_ep_size"] == 1) & (sel["distribution"] == distribution)
              & sel["num_tokens"].isin(tokens)]
    keys = ["kernel_source", "hidden_size", "inter_size", "topk", "num_experts", "num_tokens"]
    out = sel.groupby(keys, sort=True)[["latency_ms", "tokens_per_expert", "tflops"]].median()
    return out.reset_index()


def marlin_transfer(table: pd.DataFrame, target_source: str, marlin_source: str) -> pd.DataFrame:
    """Per token count both sources hold: the target's measured ms and the ms it would take at
    Marlin's measured throughput of the same token count (``ms x target TFLOP/s / Marlin TFLOP/s``)."""
    t = table[table["kernel_source"] == target_source].set_index("num_tokens")
    m = table[table["kernel_source"] == marlin_source].set_index("num_tokens")
    both = t.index.intersection(m.index)
    out = pd.DataFrame({"num_tokens": both, "target_ms": t.loc[both, "latency_ms"].to_numpy(),
                        "target_tflops": t.loc[both, "tflops"].to_numpy(),
                        "marlin_tflops": m.loc[both, "tflops"].to_numpy()})
    out["at_marlin_ms"] = out["target_ms"] * out["target_tflops"] / out["marlin_tflops"]
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m llmplan.calibration.vllm_mxfp4_moe_evidence",
                                description=__doc__.split("\n")[0])
    p.add_argument("--measurements", required=True, help="folder with one sub-folder per GPU")
    p.add_argument("--gpu", default="h200_sxm", help="GPU folder, e.g. h200_sxm")
    p.add_argument("--experts", type=int, default=128, help="gpt-oss expert count of the triton rows (128: 120b)")
    return p


def main(argv: list[str]) -> int:
    a = build_parser().parse_args(argv)
    try:
        table = throughput_table(moe_table(a.measurements, a.gpu))
        if table.empty:
            raise UserError(f"no vLLM {DTYPE} MoE rows at moe_tp = EP = 1 in {a.gpu}'s moe table", key="--gpu",
                            fix="pick a GPU folder whose moe table holds vLLM's MXFP4 kernels (h100_sxm, h200_sxm)")
    except UserError as exc:
        print(exc.render(), file=sys.stderr)
        return EXIT_USER_ERROR
    pd.set_option("display.width", 200)
    print(f"vLLM {DTYPE} fused MoE on {a.gpu}, moe_tp = EP = 1, {DISTRIBUTION} routing (medians):")
    print(table.round(3).to_string(index=False))
    triton = table[table["kernel_source"].str.contains("triton") & (table["num_experts"] == a.experts)]
    marlin = table[table["kernel_source"].str.contains("marlin")]
    if triton.empty or marlin.empty:
        print("\nno triton / Marlin pair to compare")
        return 0
    tr = pd.concat([triton, marlin])
    out = marlin_transfer(tr, str(triton["kernel_source"].iloc[0]), str(marlin["kernel_source"].iloc[0]))
    print(f"\ngpt-oss ({a.experts} experts) triton ms per layer at Marlin's throughput of the same token count "
          "(another expert shape: a transfer, not a measurement):")
    print(out.round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
