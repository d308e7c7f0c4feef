"""`llmplan catalog gpus|models`: what the catalogs hold, with key figures and sources."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from llmplan.errors import UserError


def _fmt(x, nd: int = 0) -> str:
    return "-" if x is None else (f"{x:,.{nd}f}" if isinstance(x, (int, float)) else str(x))


def show_gpus(console: Console, sources: bool) -> None:
    from llmplan.hardware_catalog.loader import gpu_table_rows

    t = Table(title="GPU catalog (dense tensor TFLOP/s; bandwidths GB/s unidirectional)", title_justify="left")
    for col in ("key", "name", "bf16", "fp8", "fp4", "HBM GB", "HBM GB/s", "L2 MB", "SMs", "scale-up", "PCIe", "$/GPU-h"):
        t.add_column(col, justify="left" if col in ("key", "name", "scale-up") else "right")
    if sources:
        t.add_column("sources")
    for r in gpu_table_rows():
        row = [r["key"], r["name"], _fmt(r["bf16_tflops"]), _fmt(r["fp8_tflops"]), _fmt(r["fp4_tflops"]),
               _fmt(r["hbm_gb"]), _fmt(r["hbm_bw_gbps"]), _fmt(r["l2_mb"]), _fmt(r["sm_count"]), r["scaleup"],
               f"gen{r['pcie_gen']}", _fmt(r["usd_per_hour"], 2)]
        if sources:
            row.append(r["source"] + (f"; price: {r['price_source']}" if r.get("price_source") else "") +
                       (f"; unknown: {r['unknown']}" if r["unknown"] else ""))
        t.add_row(*row)
    console.print(t)
    if not sources:
        console.print("Each figure's source: `llmplan catalog gpus --sources` or hardware_catalog/data/gpus.yaml.")


def show_models(console: Console) -> None:
    from llmplan.model_catalog.derived import kv_bytes_per_token, param_count_active, param_count_total
    from llmplan.model_catalog.loader import list_models

    t = Table(title="Model catalog (use the key or the Hugging Face id: model=<key>)", title_justify="left")
    for col in ("key", "Hugging Face id", "type", "layers", "hidden", "heads/kv", "params B", "active B", "KV KB/token (bf16)", "weights"):
        t.add_column(col, justify="left" if col in ("key", "Hugging Face id", "type", "weights") else "right")
    for m in list_models():
        kind = ("MoE+MLA" if m.is_mla else "MoE") if m.is_moe else ("dense+MLA" if m.is_mla else "dense")
        if m.is_moe:
            kind += f" {m.moe.num_experts}e/top{m.moe.top_k}"
        t.add_row(m.key, m.hf_id, kind, str(m.num_layers), str(m.hidden_size), f"{m.num_attention_heads}/{m.num_kv_heads}",
                  f"{param_count_total(m) / 1e9:.1f}", f"{param_count_active(m) / 1e9:.1f}",
                  f"{kv_bytes_per_token(m, 'bf16') / 1024:.0f}", m.native_dtype)
    console.print(t)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="llmplan catalog", description="List the GPU or model catalog.")
    p.add_argument("what", choices=["gpus", "models"], help="which catalog")
    p.add_argument("--sources", action="store_true", help="show each GPU's sources and unknown figures")
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            raise UserError("expected `llmplan catalog gpus` or `llmplan catalog models`", key="catalog") from None
        return 0
    console = Console(width=200)
    if args.what == "gpus":
        show_gpus(console, args.sources)
    else:
        show_models(console)
    return 0
