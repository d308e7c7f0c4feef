"""Read a checkpoint's shipped weight format into a :class:`QuantSpec`.

Sources, in the order a loader would use them: the ``quantization_config`` block of
config.json (``fp8`` block scaling, ``mxfp4``, ``compressed-tensors``, ``modelopt``,
``awq``/``gptq``), or NVIDIA ModelOpt's ``hf_quant_config.json`` beside it (``quant_algo``
FP8 / NVFP4 / MIXED_PRECISION, ``exclude_modules``, ``quantized_layers``). Each linear
tensor of the model (:mod:`model_catalog.tensors`) is matched against the format groups'
targets and the ignore patterns: ModelOpt patterns are shell globs (``fnmatch``);
compressed-tensors entries starting ``re:`` are regular expressions (``re.match``) and
bare entries are module names or class names (``Linear``).
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from llmplan.errors import CatalogError
from llmplan.model_catalog.spec import ModelSpec, QuantPart, QuantSpec, WeightFormat
from llmplan.model_catalog.tensors import linear_tensors

FP8_TENSOR = WeightFormat("fp8_tensor", "fp8", 8, tensor_scale_bytes=8.0)        # weight + input scale, fp32
FP8_BLOCK128 = WeightFormat("fp8_block128", "fp8", 8, group_size=128 * 128, scale_bytes=4.0)
NVFP4 = WeightFormat("nvfp4", "fp4", 4, group_size=16, scale_bytes=1.0, tensor_scale_bytes=8.0)
MXFP4 = WeightFormat("mxfp4", "fp4", 4, group_size=32, scale_bytes=1.0)
#: the format a precision is stored in when a user asks for it on a bf16 checkpoint.
DEFAULT_FORMATS = {"fp8": FP8_TENSOR, "fp4": NVFP4, "int8": WeightFormat("int8_channel", "int8", 8),
                   "int4": WeightFormat("int4_g128", "int4", 4, group_size=128, scale_bytes=2.0)}


#: GEMM dtype group of block-scaled fp8 weights (the kernel tables' ``gemm_dtype`` name)
BLOCK_FP8_GEMM_DTYPE = "fp8_block"


def is_block_fp8(fmt: WeightFormat) -> bool:
    """True for fp8 weights with block scales (``weight_block_size`` in config.json, or a
    compressed-tensors ``block_structure``): engines run them with block-fp8 GEMM kernels
    (DeepGEMM / CUTLASS blockwise), not the per-tensor fp8 GEMMs."""
    return fmt.precision == "fp8" and fmt.name.startswith("fp8_block")


def gemm_dtype(fmt: WeightFormat) -> str:
    """The kernel dtype group a matmul over weights stored as ``fmt`` reads
    (``fp8_block`` for block-scaled fp8, else the format's precision)."""
    return BLOCK_FP8_GEMM_DTYPE if is_block_fp8(fmt) else fmt.precision


def _int_group(bits: int, group: int, scale_bytes: float = 2.0, zero_bytes: float = 0.0) -> WeightFormat:
    return WeightFormat(f"int{bits}_g{group}", f"int{bits}", bits, group_size=group, scale_bytes=scale_bytes + zero_bytes)


_ONE_LAYER = re.compile(r"layers\.(\d+)\.")


class _Matcher:
    """One pattern list (globs and ``re:`` regexes); empty matches nothing. A module name
    also covers the tensors below it (``...self_attn`` covers ``...self_attn.q_proj``).
    Globs whose only wildcard is a trailing ``*`` (nearly all exclusion lists) are
    checked as string prefixes; the rest compile into one regular expression."""

    def __init__(self, patterns: list[str]):
        self.all_linear = "Linear" in patterns
        exact: set[str] = set()
        prefixes: list[str] = []
        regexes: list[str] = []
        for p in patterns:
            if p == "Linear":
                continue
            if p.startswith("re:"):
                regexes.append(f"(?:{p[3:]}).*")
            elif not any(ch in p for ch in "?[") and "*" not in p:
                exact.add(p)
                prefixes.append(p + ".")
            elif not any(ch in p[:-1] for ch in "*?[") and p.endswith("*"):
                prefixes.append(p[:-1])
            else:
                regexes += [f"(?:{fnmatch.translate(q)})" for q in (p, f"{p}.*")]
        self._exact = exact
        self._regex = re.compile("|".join(regexes)) if regexes else None
        # prefixes naming one layer ("...layers.17.") are only tried on that layer's tensors
        self._general: list[str] = []
        self._by_layer: dict[int, list[str]] = {}
        for q in prefixes:
            m = _ONE_LAYER.search(q)
            (self._by_layer.setdefault(int(m.group(1)), []) if m else self._general).append(q)
        self._per_layer: dict[int, tuple[str, ...]] = {}

    def _prefixes(self, layer: int) -> tuple[str, ...]:
        if layer not in self._per_layer:
            self._per_layer[layer] = tuple(self._general + self._by_layer.get(layer, []))
        return self._per_layer[layer]

    def match(self, names: list[str], layer: int = -1) -> bool:
        if self.all_linear:
            return True
        prefixes = self._prefixes(layer)
        for n in names:
            if n in self._exact or (prefixes and n.startswith(prefixes)):
                return True
            if self._regex is not None and self._regex.fullmatch(n):
                return True
        return False


def _fmt_from_weights(w: dict[str, Any], hidden: int) -> WeightFormat | None:
    bits, kind = w.get("num_bits"), str(w.get("type", "int"))
    group = w.get("group_size")
    if bits == 4 and kind == "float":
        return MXFP4 if group == 32 else NVFP4
    if bits == 8 and kind == "float":
        block = w.get("block_structure")
        if isinstance(block, list) and len(block) == 2:
            return WeightFormat(f"fp8_block{block[0]}", "fp8", 8, group_size=block[0] * block[1], scale_bytes=4.0)
        return WeightFormat("fp8_channel", "fp8", 8, group_size=hidden, scale_bytes=4.0) \
            if w.get("strategy") == "channel" else FP8_TENSOR
    if bits in (4, 8) and kind == "int":
        if w.get("strategy") == "group" and group:
            return _int_group(bits, int(group))
        return WeightFormat(f"int{bits}_channel", f"int{bits}", bits, group_size=hidden, scale_bytes=2.0)
    return None


def _groups(qc: dict[str, Any], hq: dict[str, Any] | None, hidden: int, where: str
            ) -> tuple[list[tuple[WeightFormat, _Matcher]], _Matcher] | None:
    """(format, targets) groups and the ignore matcher, or None for an unquantized model."""
    method = str(qc.get("quant_method", "")).lower()
    algo = str(qc.get("quant_algo") or (hq or {}).get("quant_algo") or "").upper()
    ignore = [str(x) for x in (qc.get("ignore") or qc.get("modules_to_not_convert") or qc.get("exclude_modules")
                               or (hq or {}).get("exclude_modules") or [])]
    everything = _Matcher(["Linear"])
    if method in ("modelopt", "") and algo in ("FP8", "NVFP4"):
        return [(FP8_TENSOR if algo == "FP8" else NVFP4, everything)], _Matcher(ignore)
    if algo == "MIXED_PRECISION" or method == "compressed-tensors" or (method == "modelopt" and qc.get("config_groups")):
        groups = []
        for g in (qc.get("config_groups") or {}).values():
            fmt = _fmt_from_weights(g.get("weights") or {}, hidden) if isinstance(g, dict) else None
            if fmt is None:
                raise CatalogError(f"{where}: unsupported quantization group {g.get('weights')!r}", key="model")
            groups.append((fmt, _Matcher([str(t) for t in g.get("targets") or ["Linear"]])))
        layers = (hq or {}).get("quantized_layers") or qc.get("quantized_layers") or {}
        by_algo: dict[str, list[str]] = {}
        for name, entry in layers.items():
            by_algo.setdefault(str((entry or {}).get("quant_algo", "")).upper(), []).append(f"{name}*")
        for a, names in sorted(by_algo.items()):  # e.g. FP8, NVFP4, W4A16_NVFP4 (weight-only NVFP4)
            fmt = NVFP4 if "NVFP4" in a else FP8_TENSOR if a.startswith("FP8") else None
            if fmt is None:
                raise CatalogError(f"{where}: unsupported per-layer quant_algo '{a}'", key="model")
            groups.append((fmt, _Matcher(names)))
        if not groups:
            raise CatalogError(f"{where}: quantization '{algo or method}' lists no format groups", key="model")
        return groups, _Matcher(ignore)
    if method in ("fp8", "fbgemm_fp8"):
        block = qc.get("weight_block_size")
        if isinstance(block, list) and len(block) == 2:
            fmt = WeightFormat(f"fp8_block{block[0]}", "fp8", 8, group_size=block[0] * block[1], scale_bytes=4.0)
        elif method == "fbgemm_fp8":
            fmt = WeightFormat("fp8_channel", "fp8", 8, group_size=hidden, scale_bytes=4.0)
        else:
            fmt = FP8_TENSOR
        return [(fmt, everything)], _Matcher(ignore)
    if method == "mxfp4":
        return [(MXFP4, everything)], _Matcher(ignore)
    if method in ("awq", "gptq") and qc.get("bits") in (4, 8):
        bits, group = int(qc["bits"]), int(qc.get("group_size") or 128)
        return [(_int_group(bits, group, 2.0, bits / 8.0), everything)], _Matcher(ignore)
    raise CatalogError(f"{where}: unsupported quantization_config (quant_method '{method}', quant_algo '{algo}')",
                       key="model", fix="remove the quantization_config block to plan the model as bf16")


def parse_quant(spec: ModelSpec, qc: dict[str, Any] | None, hf_quant: dict[str, Any] | None,
                where: str) -> QuantSpec | None:
    """The shipped format of ``spec``'s checkpoint, or None when it is bf16/fp16."""
    hq = None
    if isinstance(hf_quant, dict):
        hq = hf_quant.get("quantization") if isinstance(hf_quant.get("quantization"), dict) else hf_quant
    if not isinstance(qc, dict):
        if hq is None:
            return None
        qc = {}
    resolved = _groups(qc, hq, spec.hidden_size, where)
    if resolved is None:
        return None
    groups, ignore = resolved
    parts: dict[tuple[str, WeightFormat], list[int]] = {}
    for t in linear_tensors(spec):
        names = t.full_names()
        if ignore.match(names, t.layer):
            continue
        # lm_head is quantized only where a group names it (transformers and ModelOpt keep it
        # out of "all Linear" recipes)
        fmt = next((f for f, targets in groups if targets.match(names, t.layer)
                    and not (t.component == "lm_head" and targets.all_linear)), None)
        if fmt is None:
            continue
        acc = parts.setdefault((t.component, fmt), [0, 0])
        acc[0] += t.params * t.count
        acc[1] += t.count
    if not parts:
        return None
    source = "hf_quant_config.json" if hq is not None and not qc else "config.json quantization_config"
    return QuantSpec(tuple(QuantPart(c, f, p, n) for (c, f), (p, n) in parts.items()), source=source)


def block_fp8_requant(spec: ModelSpec, where: str) -> QuantSpec | None:
    """``spec`` quantized at load time to 128x128 block-scaled fp8 (every linear weight but
    lm_head, as a ``weight_block_size: [128, 128]`` checkpoint stores it): the weights a
    run labelled ``gemm_quant_mode=fp8_block`` on a bf16 checkpoint serves."""
    return parse_quant(spec, {"quant_method": "fp8", "weight_block_size": [128, 128]}, None, where)
