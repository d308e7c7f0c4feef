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
    from llmplan.model_catalog.survey import configs_without_preset

    t = Table(title="Model catalog (use the key or the Hugging Face id: model=<key>)", title_justify="left")
    models = list_models()
    # keys and HF ids are what users copy into model=...: never shortened or wrapped
    whole = {"key": max(len(m.key) for m in models), "Hugging Face id": max(len(m.hf_id) for m in models)}
    for col in ("key", "Hugging Face id", "type", "layers", "hidden", "heads/kv", "params B", "active B", "KV KB/token (bf16)", "weights"):
        t.add_column(col, justify="left" if col in ("key", "Hugging Face id", "type", "weights") else "right",
                     min_width=whole.get(col), no_wrap=col in whole)
    for m in models:
        kind = m.family + (f" {m.moe.num_experts}e/top{m.moe.top_k}" if m.is_moe else "")
        kind += " (text; vision encoder not served)" if m.vision_excluded else ""
        t.add_row(m.key, m.hf_id, kind, str(m.num_layers), str(m.hidden_size), f"{m.num_attention_heads}/{m.num_kv_heads}",
                  f"{param_count_total(m) / 1e9:.1f}", f"{param_count_active(m) / 1e9:.1f}",
                  f"{kv_bytes_per_token(m, 'bf16') / 1024:.0f}", m.quant.main.name if m.quant else m.native_dtype)
    console.print(t)
    show_config_status(console, configs_without_preset(), "Configs in the catalog without a preset")


def show_config_status(console: Console, rows, title: str) -> None:
    if not rows:
        return
    t = Table(title=f"{title} (family, or why it is not supported)", title_justify="left")
    for col in ("config", "family / weights", "unsupported because"):
        t.add_column(col)
    for r in rows:
        t.add_row(r.hf_id, f"{r.family} / {r.weights}" if r.family else "-", r.reason or "")
    console.print(t)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="llmplan catalog", description="List the GPU or model catalog.")
    p.add_argument("what", choices=["gpus", "models"], help="which catalog")
    p.add_argument("--sources", action="store_true", help="show each GPU's sources and unknown figures")
    p.add_argument("--configs", metavar="DIR", help="models: also survey the config.json files in DIR")
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            raise UserError("expected `llmplan catalog gpus` or `llmplan catalog models`", key="catalog") from None
        return 0
    # options that the listing asked for would not use, and a folder that is not there, are
    # refused before anything is printed (not after the whole model table)
    if args.configs and args.what != "models":
        raise UserError("--configs surveys model config.json files", key="configs",
                        fix=f"use `llmplan catalog models --configs {args.configs}`")
    if args.sources and args.what != "gpus":
        raise UserError("--sources lists the GPU catalog's sources", key="sources",
                        fix="use `llmplan catalog gpus --sources` (each model's source: model_catalog/configs/PROVENANCE.md)")
    if args.configs:
        from pathlib import Path

        if not Path(args.configs).is_dir():
            raise UserError(f"not a folder: {args.configs}", key="configs", fix="give a folder of config.json files")
    console = Console(width=200)
    if args.what == "gpus":
        show_gpus(console, args.sources)
    else:
        show_models(console)
        if args.configs:
            from llmplan.model_catalog.survey import survey

            show_config_status(console, survey(args.configs), f"Configs in {args.configs}")
    return 0
