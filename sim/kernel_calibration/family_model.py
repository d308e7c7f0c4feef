"""A fitted latency model of one operator family: base parameters and a residual ensemble
per dtype group, with the shape range it was fitted on.

``GroupModel`` = :class:`llmplan.sim.kernel_calibration.physics.BaseParams` (floor + soft roofline) times
``exp(gbt(x))``, a boosted-tree correction in log space (absent in the cross-gen tier
where it would not transfer). Prediction is available vectorised over a canonical frame
(fitting, validation) and for one shape in plain Python (the kernel model's fast path);
both use the same feature code, so they agree to rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:  # pandas is needed only when fitting or scoring frames
    import pandas as pd

from llmplan.errors import UserError
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration import attention_kernels as AK
from llmplan.sim.kernel_calibration import moe_kernels as K
from llmplan.sim.kernel_calibration import moe_tuned as T
from llmplan.sim.kernel_calibration.gbt import GBTModel
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import BaseParams, predict_us, predict_us_scalar

#: canonical dtype group of each family's rows/queries (None: one group "all")
GROUP_COLUMN: dict[str, str | None] = {"gemm": "dtype", "moe": "dtype", "attention_prefill": None,
                                       "attention_decode": None, "mla_prefill": None, "mla_decode": None,
                                       "mla_bmm": "dtype", "gdn_prefill": None, "gdn_decode": None}

#: query dtype -> groups to try in order (engines' formats for that precision)
GROUP_FALLBACK: dict[str, dict[str, tuple[str, ...]]] = {
    "gemm": {"bf16": ("bf16",), "fp16": ("bf16",), "fp8": ("fp8", "fp8_block"), "int8": ("fp8",),
             "fp8_block": ("fp8_block", "fp8"), "fp4": ("fp4", "fp8", "bf16"), "nvfp4": ("fp4", "fp8", "bf16"),
             "int4": ("bf16",)},
    "mla_bmm": {"bf16": ("bf16",), "fp16": ("bf16",), "fp8": ("fp8", "bf16"), "fp8_block": ("fp8", "bf16"),
                "fp4": ("fp8", "bf16")},
    # MoE 16-bit queries: the engine's own 8-bit group, timed with 16-bit weight bytes and the
    # bf16 peak (MOE_16BIT), before another engine's bf16 group (the next tier candidate).
    # Kernels differ more between engines than between one engine's dtypes: on the grouped
    # split (--split grouped:0.2:1, H100) TensorRT-LLM's only bf16 configuration (hidden 1024 /
    # inter 2688 / top-22 of 512, its non-gated torch-flow kernel) held out was 109.5% MAPE
    # from SGLang's bf16 Triton model (2x over), 6.8% from TensorRT-LLM's own fp8 model; MoE
    # MAPE 25.9 -> 17.6% (docs/ACCURACY.md "Measured tier")
    "moe": {"bf16": ("bf16", "fp8", "fp8_block"), "fp16": ("bf16", "fp8", "fp8_block"),
            "fp8": ("fp8", "fp8_block"), "int8": ("fp8", "fp8_block"),
            "fp8_block": ("fp8_block", "fp8"), "fp4": ("fp4", "w4a8_mxfp4", "w4a16_mxfp4", "int4_wo"),
            "nvfp4": ("fp4", "w4a8_mxfp4", "w4a16_mxfp4", "int4_wo"),
            "w4a8_mxfp4": ("w4a8_mxfp4", "fp4", "w4a16_mxfp4"),
            "w4a16_mxfp4": ("w4a16_mxfp4", "int4_wo"), "int4": ("int4_wo", "w4a16_mxfp4"),
            "int4_wo": ("int4_wo", "w4a16_mxfp4")},
}

#: MoE query dtypes timed with their own weight bytes and compute peak whichever group answers
#: them (an engine's 8-bit group standing in for a bf16 group it lacks, see GROUP_FALLBACK)
MOE_16BIT = ("bf16", "fp16")

#: numeric shape columns whose fitted [min, max] decide ``extrapolated``
RANGE_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"),
    "attention_prefill": ("batch", "q_len", "ctx", "num_heads", "num_kv_heads", "head_dim"),
    "attention_decode": ("batch", "kv_len", "num_heads", "num_kv_heads", "head_dim"),
    "moe": ("num_tokens", "hidden", "inter", "topk", "num_experts", "moe_tp", "moe_ep"),
    "mla_prefill": ("batch", "q_len", "ctx", "num_heads"),
    "mla_decode": ("batch", "kv_len", "num_heads"),
    "mla_bmm": ("num_tokens", "num_heads"),
    "gdn_prefill": ("batch", "seq_len", "v_heads"),
    "gdn_decode": ("batch", "v_heads"),
}


#: configuration columns: outside a group's range of these, the family's shared residual
#: ensemble (fitted over all groups) replaces the group's own
CONFIG_COLUMNS: dict[str, tuple[str, ...]] = {"moe": ("hidden", "inter", "topk", "num_experts")}


def group_keys(family: str, df: pd.DataFrame) -> pd.Series:
    col = GROUP_COLUMN.get(family)
    return df[col].astype(str) if col else df.index.to_series().map(lambda _: "all")


def row_kernels(family: str, df: pd.DataFrame) -> np.ndarray:
    """Kernel family each row ran (:func:`moe_kernels.kernel_family` of its ``kernel_source``;
    attention rows: the label itself, :mod:`attention_kernels`; None elsewhere or without the
    column: answered by the dtype group)."""
    if family in AK.FAMILIES and "kernel_source" in df:
        return AK.attention_kernels(df["kernel_source"].to_numpy())
    if family != "moe" or "kernel_source" not in df:
        return np.full(len(df), None, dtype=object)
    src = df["kernel_source"]
    out = K.kernel_families(src.fillna("").to_numpy())
    out[src.isna().to_numpy()] = None     # a row without a label: the engine's rule, as a query
    return out


def shape_ranges(family: str, df: pd.DataFrame) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for c in RANGE_COLUMNS[family]:
        v = (df["kv_len"] - df["q_len"]) if c == "ctx" else df[c]
        out[c] = [float(v.min()), float(v.max())]
    return out


@dataclass
class GroupModel:
    base: BaseParams
    gbt: GBTModel | None = None
    rows: int = 0
    ranges: dict[str, list[float]] = field(default_factory=dict)

    def predict_frame(self, phys: F.Phys, gbt: GBTModel | None = None, use: np.ndarray | None = None) -> np.ndarray:
        """Latency in ms for every row of a vectorised Phys; rows flagged in ``use`` take the
        residual ensemble ``gbt`` instead of the group's own."""
        t = predict_us(self.base, phys)
        own = self.gbt is not None and self.gbt.n_trees
        if own or gbt is not None:
            x = F.feature_matrix(phys)
            r = self.gbt.predict(x) if own else np.zeros(len(x))
            if gbt is not None and use is not None and use.any():
                r[use] = gbt.predict(x[use])
            t = t * np.exp(r)
        return t / 1e3

    def predict_one(self, phys: F.Phys, gbt: GBTModel | None = None) -> tuple[float, str]:
        """(latency ms, dominant bound) for one shape (scalar Phys); ``gbt`` replaces the
        group's residual ensemble when given."""
        t, bound = predict_us_scalar(self.base, phys.t_c, phys.t_m, phys.q, phys.ws_l2, phys.t_l2, phys.waves)
        g = gbt if gbt is not None else self.gbt
        if g is not None and g.n_trees:
            t *= math.exp(g.predict_one(np.array(phys.x, dtype=np.float64)))
        return t / 1e3, bound

    def outside_config(self, family: str, shape: dict[str, float]) -> bool:
        """The query's model configuration (e.g. MoE expert shape) lies outside this group's."""
        return self.outside({c: shape[c] for c in CONFIG_COLUMNS.get(family, ()) if c in shape})

    def outside(self, shape: dict[str, float]) -> bool:
        for c, (lo, hi) in self.ranges.items():
            v = shape.get(c)
            if v is not None and (v < lo * (1 - 1e-9) or v > hi * (1 + 1e-9)):
                return True
        return False

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base.to_dict(), "rows": int(self.rows),
                "ranges": {k: [float(f"{a:.9g}"), float(f"{b:.9g}")] for k, (a, b) in sorted(self.ranges.items())},
                "gbt": None if self.gbt is None else self.gbt.to_dict()}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "GroupModel":
        return GroupModel(BaseParams.from_dict(d["base"]),
                          None if d.get("gbt") is None else GBTModel.from_dict(d["gbt"]),
                          int(d.get("rows", 0)), {k: list(v) for k, v in d.get("ranges", {}).items()})


@dataclass
class FamilyModel:
    """Group models of one family for one (GPU, backend), or the cross-gen pool.

    ``shared_gbt``: one residual ensemble fitted over every group's rows (used for MoE,
    whose features carry the dtype, so expert-configuration effects are learnt from all
    formats); the groups then hold the same object."""

    family: str
    groups: dict[str, GroupModel]
    shared_gbt: GBTModel | None = None
    #: MoE work terms the groups were fitted with (features.MOE_FORMS); files without the
    #: key were fitted with the ``uniform`` form and keep predicting with it
    work_form: str = F.MOE_FORM
    #: MoE: the rows of one kernel family of a dtype group whose rows mix kernel families
    #: (:mod:`moe_kernels`), fitted apart, keyed ``dtype/family`` (:func:`moe_kernels.kernel_group_key`);
    #: kept out of :attr:`groups` so dtype-only queries, the shared ensemble and the cross-gen pool
    #: see exactly the groups they saw before
    kernel_groups: dict[str, GroupModel] = field(default_factory=dict)
    #: MoE: the kernel families of each dtype group's rows (files without it: unknown)
    group_kernels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: attention tables that mix kernels: the kernel the engine ran per head configuration
    #: (:func:`attention_kernels.head_kernel_lookup`), from which queries and table rows alike get
    #: their kernel group (:func:`attention_kernels.engine_attention_kernel`)
    head_kernels: dict[str, str] = field(default_factory=dict)

    def group(self, key: str) -> GroupModel:
        """The group model of a key :meth:`resolve_group` returned (a dtype group or a kernel group)."""
        return self.groups[key] if key in self.groups else self.kernel_groups[key]

    def kernel_of(self, key: str) -> str | None:
        """The one kernel family whose rows fitted a group key (:meth:`resolve_group`'s answer): a
        kernel group's own, or a dtype group's whose rows all ran one family; None when unknown."""
        if "/" in key and key in self.kernel_groups:
            return key.split("/", 1)[1]
        kernels = self.group_kernels.get(key, ())
        return kernels[0] if len(kernels) == 1 else None

    def resolve_group(self, dtype: str | None, kernel: str | None = None) -> tuple[str | None, bool]:
        """(group to use, exact) for a query dtype; None when no group fits.

        ``kernel``: the kernel family the engine runs for the query (:mod:`moe_kernels`; MoE only).
        Along the dtype fallback chain, the first group whose rows ran that kernel answers: the
        dtype's kernel group, or a dtype group all of whose rows ran it (or whose kernels the file
        does not record). None of them: the dtype chain as without a kernel (the whole group)."""
        if GROUP_COLUMN.get(self.family) is None:
            if kernel is not None and K.kernel_group_key("all", kernel) in self.kernel_groups:
                return K.kernel_group_key("all", kernel), True   # attention: that kernel's rows
            return ("all" if "all" in self.groups else None), True
        chain = GROUP_FALLBACK.get(self.family, {}).get(str(dtype), (str(dtype),))
        if kernel is not None and (self.kernel_groups or self.group_kernels):
            for i, g in enumerate(chain):
                kg = K.kernel_group_key(g, kernel)
                if kg in self.kernel_groups:
                    return kg, i == 0
                if g in self.groups and self.group_kernels.get(g, (kernel,)) == (kernel,):
                    return g, i == 0
        for i, g in enumerate(chain):
            if g in self.groups:
                return g, i == 0
        return None, False

    def to_dict(self) -> dict[str, Any]:
        out = {"groups": {g: m.to_dict() for g, m in sorted(self.groups.items())},
               "shared_gbt": None if self.shared_gbt is None else self.shared_gbt.to_dict()}
        if self.family == "moe" and self.work_form != F.MOE_FORM_UNIFORM:
            out["work_form"] = self.work_form   # files without the key are ``uniform``
        if self.kernel_groups:
            out["kernel_groups"] = {g: m.to_dict() for g, m in sorted(self.kernel_groups.items())}
        if self.group_kernels:
            out["group_kernels"] = {g: list(v) for g, v in sorted(self.group_kernels.items())}
        if self.head_kernels:
            out["head_kernels"] = dict(sorted(self.head_kernels.items()))
        return out

    @staticmethod
    def from_dict(family: str, d: dict[str, Any]) -> "FamilyModel":
        shared = None if d.get("shared_gbt") is None else GBTModel.from_dict(d["shared_gbt"])
        form = str(d.get("work_form", F.MOE_FORM_UNIFORM))
        if family == "moe" and form not in F.MOE_FORMS:
            raise UserError(f"calibration MoE model has work form {form!r}, unknown to this version "
                            f"(known: {', '.join(F.MOE_FORMS)})", key="calibration",
                            fix="re-run `llmplan calibrate` with this version, or upgrade llmplan")
        fm = FamilyModel(family, {g: GroupModel.from_dict(v) for g, v in d["groups"].items()}, shared, form,
                         {g: GroupModel.from_dict(v) for g, v in d.get("kernel_groups", {}).items()},
                         {g: tuple(v) for g, v in d.get("group_kernels", {}).items()},
                         {str(k): str(v) for k, v in d.get("head_kernels", {}).items()})
        _check_feature_names(fm)
        return fm


def _check_feature_names(fm: FamilyModel) -> None:
    """The residual trees index the feature vector by position (:data:`features.FEATURES`): a file's trees
    are read only where their feature names are the leading names of this version's list (features are
    appended, as session 13 appended ``triton_default_cfg`` and ``k2_unaligned16`` to MoE's, so older
    files' trees never read the new columns); anything else would read other features without a word."""
    known = tuple(F.FEATURES.get(fm.family, ()))
    gbts = [("shared_gbt", fm.shared_gbt)] + [(g, m.gbt) for g, m in sorted({**fm.groups, **fm.kernel_groups}.items())]
    for where, gbt in gbts:
        names = tuple(gbt.feature_names) if gbt is not None else ()
        if names and names != known[:len(names)]:
            raise UserError(f"calibration {fm.family} model ({where}) was fitted on features "
                            f"{', '.join(names)}, which are not this version's leading {fm.family} features "
                            f"({', '.join(known[:len(names)])})", key="calibration",
                            fix="re-run `llmplan calibrate` with this version, or use the llmplan version that wrote the file")


def _rule_kernels(model: FamilyModel, df: pd.DataFrame, keys: np.ndarray, kernels: np.ndarray, gpu_key: str,
                  backend: str | None) -> np.ndarray:
    """Rows that do not say which kernel they ran (no ``kernel_source``) take the engine's rule, as a
    query does (:func:`moe_kernels.engine_moe_kernel` on the dtype group that answers, the row's own
    engine, no model architecture)."""
    miss = np.array([k is None for k in kernels.tolist()], dtype=bool)
    if not miss.any():
        return kernels
    out = kernels.copy()
    engines = df["backend"].astype(str).to_numpy() if "backend" in df else np.full(len(df), str(backend))
    eps = df["moe_ep"].to_numpy(dtype=np.float64) if "moe_ep" in df else np.ones(len(df))
    idx = np.flatnonzero(miss)
    for eng, key, ep in sorted(set(zip(engines[idx].tolist(), keys[idx].tolist(), eps[idx].tolist())), key=str):
        g, _ = model.resolve_group(key)
        if g is not None:
            sel = miss & (engines == eng) & (keys == key) & (eps == ep)
            out[sel] = K.engine_moe_kernel(eng, gpu_key, g, max(int(ep), 1), None)
    return out


def moe_facts_kernel(model: FamilyModel, group: str, pooled: bool, rule: Callable[[], str | None]) -> str | None:
    """The kernel family whose engine facts (tuned configuration, masked pairs) a MoE answer of ``group``
    carries: the group's own (:meth:`FamilyModel.kernel_of`), else, for the cross-gen pool whose members
    ran several kernels, the engine's rule (``rule``, evaluated only then). One rule for scalar queries
    (sim/calibrated.py) and label-less frames (:func:`predict_family_frame`)."""
    kern = model.kernel_of(group)
    return rule() if kern is None and pooled else kern


def predict_family_frame(model: FamilyModel, df: pd.DataFrame, gpu: GPUFeatures,
                         backend: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(latency ms, group found) for every row of a canonical frame of one GPU.
    Rows whose group the model lacks get NaN. ``backend``: the engine whose model answers
    (:func:`features.frame_phys`; default each row's own)."""
    out = np.full(len(df), np.nan)
    if not len(df):
        return out, np.zeros(0, dtype=bool)
    keys = group_keys(model.family, df).to_numpy()
    kernels = row_kernels(model.family, df)
    if model.family == "moe" and (model.kernel_groups or model.group_kernels):
        kernels = _rule_kernels(model, df, keys, kernels, gpu.key, backend)
    elif model.family in AK.FAMILIES:
        # the engine's rule, never the row's label: a row is answered as a query of its head
        # configuration is (sim/calibrated.py), so validation and the bands score the path users get
        kernels = AK.rule_kernels(model.head_kernels, df)
    for key, kern in sorted(set(zip(keys.tolist(), kernels.tolist())), key=str):
        g, _ = model.resolve_group(key, kern)
        if g is None:
            continue
        mask = (keys == key) & (kernels == kern)
        sub = df[mask]
        gm = model.group(g)
        use = None
        if model.shared_gbt is not None and model.family in CONFIG_COLUMNS:
            use = np.zeros(len(sub), dtype=bool)
            for c in CONFIG_COLUMNS[model.family]:
                if c in gm.ranges:
                    lo, hi = gm.ranges[c]
                    v = sub[c].to_numpy(dtype=np.float64)
                    use |= (v < lo * (1 - 1e-9)) | (v > hi * (1 + 1e-9))
        # MoE rows without a kernel label take the kernel facts a query gets (sim/calibrated.py)
        fk = moe_facts_kernel(model, g, backend == "pooled", lambda: kern) if model.family == "moe" else None
        phys = F.frame_phys(model.family, sub, gpu, model.work_form, backend, moe_kernel=fk, moe_group=g)
        out[mask] = gm.predict_frame(phys, model.shared_gbt, use)
    return out, ~np.isnan(out)


def _moe_query_facts(backend: str | None, kernel: str | None, gpu: GPUFeatures, group: str,
                     q: dict[str, Any]) -> dict[str, Any]:
    """``default_cfg`` (the MoE feature ``triton_default_cfg``; the group's dtype names the
    configuration file's dtype, as its rows' own do) and ``masked`` of a query answered by a group of
    ``kernel`` (:func:`features.moe_rule_facts`, the rule label-less frames use too)."""
    if backend is None:
        return {"default_cfg": T.NOT_COVERED, "masked": 0.0}
    cfg, masked = F.moe_rule_facts(backend, gpu.key, kernel, group, q["num_tokens"], q["topk"], q["num_experts"],
                                   q["inter"], q["moe_tp"], q["moe_ep"])
    return {"default_cfg": cfg, "masked": masked}


# ---------------------------------------------------------------------------------------------
# scalar queries (the KernelModel protocol's arguments) -> Phys
# ---------------------------------------------------------------------------------------------
def _wbytes(dtype: str) -> float:
    return F.DTYPE_BYTES.get(dtype, 2.0)


def scalar_phys(family: str, gpu: GPUFeatures, group: str, q: dict[str, Any], moe_form: str = F.MOE_FORM,
                backend: str | None = None, kernel: str | None = None, moe_engine: str | None = None) -> F.Phys:
    """Physical terms of one protocol query (``q`` holds the canonical shape fields;
    ``moe_form``: the answering model's :attr:`FamilyModel.work_form`; ``backend``: the engine
    whose model answers, for a GEMM the weight copies its collector cycles through,
    :func:`features.gemm_bench_copies`, as :func:`features.frame_phys` reads a table row;
    ``kernel``: MoE, the kernel family of the answering group (:meth:`FamilyModel.kernel_of`): a
    Triton group's query gets the engine's tuned-or-default configuration fact from the same file
    as its rows (:func:`moe_tuned.triton_default_config` for ``gpu``'s tables) and, in the masked
    work forms (:data:`features.MOE_MASKED_FORMS`), the masked remote pairs' bytes)."""
    ops = F.PY
    if family == "gemm":
        dt = q["dtype"]
        peak = gpu.peak(F.COMPUTE_DTYPE.get(dt, F.COMPUTE_DTYPE.get(group, "bf16")))
        wb = _wbytes(dt)
        act_q = F.gemm_act_quant(dt, gpu, ops)
        if backend is None:
            return F.gemm(q["m"], q["n"], q["k"], wb, peak, gpu, ops, act_q=act_q)
        copies = F.gemm_bench_copies(backend, dt, q["n"] * q["k"] * wb, gpu, ops)
        act_ws, out_ws = F.gemm_bench_buffers(backend, dt, copies, ops)
        return F.gemm(q["m"], q["n"], q["k"], wb, peak, gpu, ops, copies, act_ws, out_ws, act_q)
    if family == "attention_prefill":
        return F.attention_prefill(q["batch"], q["q_len"], q["kv_len"], q["num_heads"], q["num_kv_heads"],
                                   q["head_dim"], _wbytes(q["kv_dtype"]), 0.0, q.get("window", 0),
                                   gpu.peak("bf16"), gpu, ops)
    if family == "attention_decode":
        return F.attention_decode(q["batch"], q["kv_len"], q["num_heads"], q["num_kv_heads"], q["head_dim"],
                                  _wbytes(q["kv_dtype"]), q.get("window", 0), gpu.peak("bf16"), gpu, ops)
    if family == "moe":
        own = q["dtype"] in MOE_16BIT      # a 16-bit query keeps its own bytes/peak (as frame_phys)
        fmt = q["dtype"] if own else group
        wb = _wbytes(fmt) if q["dtype"] in ("bf16", "fp16", "fp8", "int8") else _wbytes(q["dtype"])
        return F.moe(q["num_tokens"], q["hidden"], q["inter"], q["topk"], q["num_experts"], q["moe_tp"],
                     q["moe_ep"], wb, 1.0 if fmt == "fp8_block" else 0.0,
                     1.0 if fmt in ("int4_wo", "w4a16_mxfp4") else 0.0, q.get("skew", 0.0),
                     gpu.peak(F.COMPUTE_DTYPE.get(fmt, "bf16")), gpu, ops,
                     q.get("matrices", F.MOE_GATED_MATRICES), moe_form,
                     **_moe_query_facts(moe_engine or backend, kernel, gpu, group, q))
    if family == "mla_prefill":
        return F.mla_prefill(q["batch"], q["q_len"], q["kv_len"], q["num_heads"], _wbytes(q["kv_dtype"]),
                             gpu.peak("bf16"), gpu, ops, q.get("qk_nope_dim", F.MLA_NOPE),
                             q.get("qk_rope_dim", F.MLA_ROPE), q.get("v_head_dim", F.MLA_V))
    if family == "mla_decode":
        return F.mla_decode(q["batch"], q["kv_len"], q["num_heads"], _wbytes(q["kv_dtype"]), gpu.peak("bf16"),
                            gpu, ops, q.get("kv_lora_rank", F.MLA_KV_LORA), q.get("qk_rope_dim", F.MLA_ROPE))
    if family == "mla_bmm":
        dt = q["dtype"]     # like GEMM: the query's own format, whichever group answers it
        return F.mla_bmm(q["num_tokens"], q["num_heads"], 1.0 if q["op"] == "post" else 0.0, _wbytes(dt),
                         gpu.peak(F.COMPUTE_DTYPE.get(dt, F.COMPUTE_DTYPE.get(group, "bf16"))), gpu, ops,
                         q.get("kv_lora_rank", F.MLA_KV_LORA), q.get("qk_nope_dim", F.MLA_NOPE))
    if family in ("gdn_prefill", "gdn_decode"):
        return F.gdn(q["batch"], q.get("seq_len", 1), q["num_tokens"], q["k_heads"], q["head_k_dim"], q["v_heads"],
                     q["head_v_dim"], family == "gdn_decode", gpu.peak("bf16"), gpu, ops)
    raise KeyError(family)
