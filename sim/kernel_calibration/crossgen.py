"""The cross-gen tier: predict a GPU without measurements from its specification.

Each measured GPU's base parameters are efficiencies and costs relative to *its own*
specification (achieved share of peak compute and bandwidth, L2 bandwidth per SM, launch
floor), and its residual ensemble is expressed in GPU-normalised features (waves over the
SM count, working set over L2, compute/memory time ratio). The cross-gen model of a dtype
group therefore pools the measured GPUs' models: each is evaluated with the target's own
peak, bandwidth, SM count, L2 size and shape features, and their predictions are combined
by a geometric mean weighted by how similar each GPU's figures are to the target's
(:class:`llmplan.sim.kernel_calibration.crossgen_blend.BlendGroupModel`). No measurement
of the target is used. Guards: a target far from every measured GPU reverts toward a prior
(:mod:`crossgen_prior`), members' fp8-KV MLA decode fallbacks do not transfer to other silicon
(:mod:`crossgen_kv_guard`), and dtype groups only one GPU measured are answered by another
group of the pool (:data:`POOL_GROUP_FALLBACK`). Each member's cycle-counted terms (per-wave
cost, L2 bandwidth per SM) are moved to the target's clock (:mod:`crossgen_clock`). Where an
engine picks its kernel by architecture, members' groups are pooled only where they timed the
kernel the target runs (:mod:`crossgen_dispatch`), and collectives are pooled only over GPUs of
the target's collective library (:func:`crossgen_alpha_beta`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from llmplan.sim.kernel_calibration.calib_file import Calibration
from llmplan.sim.kernel_calibration.collectives import AlphaBeta, pooled_alpha_beta
from llmplan.sim.kernel_calibration import crossgen_clock, crossgen_dispatch, crossgen_gemm, crossgen_prior
from llmplan.sim.kernel_calibration.crossgen_blend import BlendGroupModel
from llmplan.sim.kernel_calibration.family_model import FamilyModel, GroupModel
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures, link_kind
from llmplan.sim.kernel_calibration.physics import PARAM_NAMES, BaseParams

#: evaluate each pooled GPU's residual ensemble (its shape -> efficiency corrections, in
#: GPU-normalised features) on the target's features, each capped at a factor of 2
#: (:data:`crossgen_blend.RESIDUAL_CAP`). Leave-one-GPU-out with the H100/H200 twin also left
#: out, mean MAPE over the 57 (GPU, compute family) cells: 33.7% for the former parameter
#: average, 33.9% pooling predictions without residuals, 31.6% with (docs/ACCURACY.md).
USE_RESIDUAL = True
#: groups not pooled across GPUs (none now). fp8_block GEMM latency carries an
#: engine-specific fixed cost (vLLM's Triton fallback on Ada ~300 us, its DeepGEMM/FlashInfer
#: path on Hopper 60-90 us, ~0 in SGLang/TRT-LLM); it was excluded while the pool averaged
#: parameters. Pooling the members' predictions, the nearest GPU's fp8_block model carries
#: that cost over: leave-one-GPU-out GEMM MAPE 42.4 -> 38.0% on B200, 34.4 -> 31.8% on L40S,
#: 16.8 -> 6.8% on H100, 32.0 -> 32.7% on RTX PRO 6000, others unchanged (docs/ACCURACY.md).
EXCLUDED_GROUPS: dict[str, frozenset[str]] = {}
#: weight of the GEMM model pooled over the source GPUs (:mod:`crossgen_gemm`, fitted by
#: ``python -m llmplan.calibration.fit_crossgen``) in the log-space mean with the per-GPU
#: models, where a model for exactly the tier's source GPUs was fitted (0: per-GPU models only)
GEMM_POOLED_WEIGHT = 0.5
#: rescale each member's cycle-counted terms (per-wave cost, L2 bandwidth per SM) to the
#: target's clock (:mod:`crossgen_clock`; members of the target's vendor only)
CLOCK_SCALING = True
#: apply the engines' architecture-dependent kernel choices (:mod:`crossgen_dispatch`)
DISPATCH_RULES = True
#: engine whose kernels stand in when the asked engine was measured on no GPU
DEFAULT_BACKEND = "vllm"


#: similarity pooling: a measured GPU's weight in the cross-gen pool is
#: exp(-(d / SIMILARITY_SCALE)**2), d the Euclidean distance between the target's and its
#: log figures (bf16 peak, DRAM bandwidth, SM count, L2 size). None: every GPU weighs the
#: same. Chosen leave-one-GPU-out on the seven measured GPUs (docs/ACCURACY.md) when the
#: pool averaged parameters: mean MAPE over (GPU, family) 35.0% with equal weights, 30.6% at
#: 0.6. Pooling predictions (with the H100/H200 twin also left out, the fair test of a new
#: generation): 31.6 / 31.7% at 0.6 / 1.0.
SIMILARITY_SCALE: float | None = 0.6


def _log_figures(g: GPUFeatures) -> np.ndarray:
    return np.log([max(g.peak_bf16_tflops, 1e-3), max(g.hbm_bw_gbps, 1e-3), max(g.sm_count, 1), max(g.l2_mb, 1e-3)])


def similarities(target: GPUFeatures, sources: list[GPUFeatures], scale: float | None = None) -> list[float]:
    """Unnormalised similarities exp(-(d / scale)**2) of ``sources`` to ``target``."""
    scale = SIMILARITY_SCALE if scale is None else scale
    t = _log_figures(target)
    return [math.exp(-float(np.sum((_log_figures(s) - t) ** 2)) / scale ** 2) for s in sources]


def similarity_weights(target: GPUFeatures | None, sources: list[GPUFeatures],
                       scale: float | None = None) -> list[float]:
    """Pool weights of ``sources`` for ``target`` (equal when ``scale`` is None)."""
    scale = SIMILARITY_SCALE if scale is None else scale
    n = len(sources)
    if target is None or scale is None or n == 0:
        return [1.0 / max(n, 1)] * n
    w = np.array(similarities(target, sources, scale))
    if not np.isfinite(w).all() or w.sum() < 1e-12:
        return [1.0 / n] * n
    return [float(v) for v in w / w.sum()]


def mean_params(params: list[BaseParams], weights: list[float] | None = None) -> BaseParams:
    """(Weighted) geometric mean of positive parameters, arithmetic mean of the exponent ``g``."""
    w = np.full(len(params), 1.0 / len(params)) if weights is None else np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    vals = []
    for k in PARAM_NAMES:
        xs = np.array([getattr(p, k) for p in params], dtype=np.float64)
        vals.append(float(np.dot(w, xs)) if k == "g" else float(math.exp(np.dot(w, np.log(xs)))))
    return BaseParams(*vals)


def _union_ranges(models: list[GroupModel]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for m in models:
        for c, (lo, hi) in m.ranges.items():
            a, b = out.get(c, [lo, hi])
            out[c] = [min(a, lo), max(b, hi)]
    return out


def source_gpus(cal: Calibration, family: str, backend: str, exclude: str | None = None,
                vendor: str | None = None, vendor_of: Callable[[str], str | None] | None = None) -> dict[str, str]:
    """Measured GPUs (-> the backend used) that the cross-gen model of a family pools: those
    of the target's vendor when any was measured (kernels and compilers differ between
    vendors), else all."""
    gpus = [g for g in sorted(cal.measured) if g != exclude]
    if vendor and vendor_of is not None:
        same = [g for g in gpus if (vendor_of(g) or "").lower() == vendor.lower()]
        gpus = same or gpus
    for b in (backend, DEFAULT_BACKEND):
        found = {g: b for g in gpus if cal.family_model(g, b, family) is not None}
        if found:
            return found
    found = {}
    for g in gpus:
        for b in cal.backends(g):
            if cal.family_model(g, b, family) is not None:
                found[g] = b
                break
    return found


#: dtype groups only one measured GPU has, answered in the pool by another group (flagged
#: extrapolated: ``exact`` is False): A100's TensorRT-LLM int8/int4 weight-only and SmoothQuant
#: GEMMs run its bf16 tensor cores with 1- or 0.53-byte weights (the phys terms use the
#: format's bytes), so the pooled bf16 kernels time them; they took the roofline before.
#: Leave-one-GPU-out A100 GEMM 24.8 -> 22.1% (docs/ACCURACY.md).
POOL_GROUP_FALLBACK: dict[str, dict[str, tuple[str, ...]]] = {
    "gemm": {"int8_wo": ("bf16",), "int4_wo": ("bf16",), "sq": ("bf16",)},
}


@dataclass
class PoolFamilyModel(FamilyModel):
    """The cross-gen pool of a family: resolves a dtype like any family model, then through
    :data:`POOL_GROUP_FALLBACK` (never exact)."""

    def resolve_group(self, dtype: str | None, kernel: str | None = None) -> tuple[str | None, bool]:
        # the pool keeps no kernel groups (members' dtype groups only): ``kernel`` changes nothing
        # (group_kernels, where set, only names the kernel of a group for kernel_of)
        g, exact = super().resolve_group(dtype, None)
        if g is None:
            for alt in POOL_GROUP_FALLBACK.get(self.family, {}).get(str(dtype), ()):
                if alt in self.groups:
                    return alt, False
        return g, exact


def crossgen_family(cal: Calibration, family: str, backend: str, exclude: str | None = None,
                    use_residual: bool | None = None, target: GPUFeatures | None = None,
                    vendor: str | None = None, vendor_of: Callable[[str], str | None] | None = None
                    ) -> FamilyModel | None:
    """The pooled model of a family for a GPU outside ``cal`` (or for ``exclude``); with
    ``target``, measured GPUs are weighted by similarity (:data:`SIMILARITY_SCALE`)."""
    use_residual = USE_RESIDUAL if use_residual is None else use_residual
    src = source_gpus(cal, family, backend, exclude, vendor, vendor_of)
    if not src:
        return None
    # a measured GPU's own fallback pool (groups it lacks; tiers.KernelSource.pool with no
    # exclusion) keeps the members as fitted: the clock scaling serves GPUs without tables
    rescale = target is not None and (target.key not in cal.measured or target.key == exclude)
    by_group: dict[str, list[tuple[str, GroupModel]]] = {}
    member_kernels: dict[tuple[str, str], tuple[str, ...] | None] = {}
    for g, b in sorted(src.items()):
        fm = cal.family_model(g, b, family)
        assert fm is not None
        for key in fm.groups:
            member_kernels[(g, key)] = fm.group_kernels.get(key)
        ratio = _clock_ratio(cal, g, target, vendor, vendor_of) if rescale else 1.0
        for key, gm in fm.groups.items():
            if key not in EXCLUDED_GROUPS.get(family, frozenset()):
                if ratio != 1.0:
                    gm = replace(gm, base=crossgen_clock.scaled_base(gm.base, ratio))
                by_group.setdefault(key, []).append((g, gm))
    # engine kernels chosen by architecture (crossgen_dispatch): members' groups that timed
    # another kernel than the target's are left out; a target running another group's kernel
    # is answered by that group's pool, the query rebuilt in its format
    engine = next(iter(src.values())) if len(set(src.values())) == 1 else backend
    dispatched: dict[str, str] = {}
    if target is not None and DISPATCH_RULES:
        for key in list(by_group):
            alt = crossgen_dispatch.runs_instead(family, engine, key, target)
            if alt is not None and alt in by_group:
                dispatched[key] = alt
            elif alt is None:
                own = [(g, m) for g, m in by_group[key]
                       if crossgen_dispatch.runs_instead(family, src[g], key, cal.gpus.get(g)) is None
                       and crossgen_dispatch.member_runs_engine_kernel(family, src[g], g)]
                by_group[key] = own or by_group[key]
    groups: dict[str, GroupModel] = {}
    for key, pairs in sorted(by_group.items()):
        gms = [m for _, m in pairs]
        feats = [cal.gpus[g] for g, _ in pairs]
        weights = similarity_weights(target, feats) if target is not None else [1.0 / len(gms)] * len(gms)
        # the prior's share (crossgen_prior): large only for a target far from every member
        share = crossgen_prior.prior_share(sum(similarities(target, feats))) if target is not None else 0.0
        pooled = GroupModel(mean_params([m.base for m in gms], weights), None, sum(m.rows for m in gms),
                            _union_ranges(gms))
        extra = None
        if family == "gemm" and GEMM_POOLED_WEIGHT > 0 and len(set(src.values())) == 1:
            extra = crossgen_gemm.member_for(sorted(src), next(iter(src.values())), key)
        # fp8-KV fallbacks of members on other silicon do not transfer (crossgen_kv_guard)
        guarded = tuple(m for g, m in pairs if target is not None and not same_compute(cal.gpus[g], target))
        groups[key] = BlendGroupModel.of(pooled, list(zip(gms, weights)), use_residual, extra, GEMM_POOLED_WEIGHT,
                                         share, family, guarded, target)
    for key, alt in sorted(dispatched.items()):
        assert target is not None
        groups[key] = crossgen_dispatch.DispatchedGroupModel.of(groups[alt], family, key, alt, target)
    # the kernel family of a pooled group where every member's group ran that one family (MoE:
    # FamilyModel.kernel_of, from which a query gets the kernel's facts as the members' rows had them)
    # (members of the target's architecture first: the engines pick the MoE kernel by architecture,
    # moe_kernels.engine_moe_kernel; then all members)
    group_kernels: dict[str, tuple[str, ...]] = {}
    arch = crossgen_dispatch.architecture(target)
    for key, pairs in sorted(by_group.items()):
        same = [g for g, _ in pairs if arch is not None and crossgen_dispatch.architecture(cal.gpus.get(g)) == arch]
        for members in (same, [g for g, _ in pairs]):
            ks = {member_kernels.get((g, key)) for g in members}
            if members and len(ks) == 1 and None not in ks and len(next(iter(ks))) == 1:
                group_kernels[key] = next(iter(ks))
                break
    # members of one calibration share their MoE work form (family_model.FamilyModel.work_form)
    return PoolFamilyModel(family, groups, work_form=fm.work_form, group_kernels=group_kernels)


def _clock_ratio(cal: Calibration, member: str, target: GPUFeatures | None, vendor: str | None,
                 vendor_of: Callable[[str], str | None] | None) -> float:
    """Member clock / target clock for :data:`CLOCK_SCALING` (1.0: not scaled), for members of
    the target's vendor (or where a vendor is unknown)."""
    if not CLOCK_SCALING or target is None or member not in cal.gpus:
        return 1.0
    if vendor and vendor_of is not None:
        other = vendor_of(member)
        if other and other.lower() != vendor.lower():
            return 1.0
    return crossgen_clock.clock_ratio(cal.gpus[member], target)


#: figures that must agree for two GPUs to count as the same compute silicon (sibling tier)
SIBLING_FIGURES = ("peak_bf16_tflops", "peak_fp8_tflops", "peak_fp4_tflops", "sm_count", "l2_mb")


def same_compute(a: GPUFeatures, b: GPUFeatures, rtol: float = 0.005) -> bool:
    """True when two GPUs have the same compute silicon: SM count, dense bf16/fp8/fp4
    TFLOP/s and L2 size agree (memory capacity/bandwidth, links, power, price may differ)."""
    for name in SIBLING_FIGURES:
        x, y = float(getattr(a, name)), float(getattr(b, name))
        if abs(x - y) > rtol * max(abs(x), abs(y), 1e-9):
            return False
    return True


def sibling_gpu(cal: Calibration, gpu: GPUFeatures, vendor: str | None = None,
                vendor_of: Callable[[str], str | None] | None = None) -> str | None:
    """The measured GPU with the same compute silicon as ``gpu`` (a GPU without measurements,
    or a what-if copy of a measured GPU with other memory/link figures), else None.
    The GPU's own key is preferred (what-if copies), then the alphabetically first match;
    ``vendor_of`` (key -> vendor) rejects matches of another vendor when both are known."""
    keys = sorted(cal.measured, key=lambda k: (k != gpu.key, k))
    for k in keys:
        feat = cal.gpus.get(k)
        if feat is None or not same_compute(feat, gpu):
            continue
        if vendor and vendor_of is not None:
            other = vendor_of(k)
            if other and other.lower() != vendor.lower():
                continue
        return k
    return None


def collective_library(vendor: str | None) -> str | None:
    """The collective library a vendor's serving engines use (NCCL, RCCL, oneCCL; the
    catalog's :data:`llmplan.hardware_catalog.spec.COLLECTIVE_LIBRARY`), None when unknown."""
    from llmplan.hardware_catalog.spec import COLLECTIVE_LIBRARY
    return COLLECTIVE_LIBRARY.get(vendor.lower()) if vendor else None


def crossgen_alpha_beta(cal: Calibration, gpu: GPUFeatures, vendor: str | None = None,
                        vendor_of: Callable[[str], str | None] | None = None) -> dict[str, AlphaBeta]:
    """Pooled collective parameters for ``gpu`` from the other measured GPUs: for a GPU with
    a scale-up fabric, those whose measurements ran over one too (NVLink domains behave
    alike); for a PCIe GPU, all of them. PCIe boxes differ more in topology (switches,
    sockets) than NVLink ones differ in links: the measured L40S box reaches 5% of its link
    at 8 GPUs, the RTX PRO 6000 box 35%, so pooling PCIe GPUs only put 130% MAPE on the RTX
    PRO 6000 leave-one-GPU-out against 24% pooling all (L40S 45 -> 50%, B60 64 -> 37%;
    scale-up GPUs 20-30% same-fabric, 30-56% all; docs/ACCURACY.md).

    Only GPUs whose collectives ran on the target's collective library are pooled
    (:func:`collective_library` of the vendors, where both are known): alpha (the per-call
    cost) and eta (the achieved share of the link) are properties of the library's protocol
    and launch path (NCCL's LL/LL128/Simple protocols and CUDA-graph launches, oneCCL's SYCL
    path on Intel XPUs, RCCL on AMD), not of the link. A target whose library no measured GPU
    ran gets no pooled parameters: an empty table, so the caller times it with the
    specification link model (tier ``spec``, as it reports). Leave-one-GPU-out, the Arc Pro
    B60's oneCCL rows from the NCCL GPUs' pooled parameters: 36.5% MAPE against the link
    model's 31.2% (docs/ACCURACY.md, "Cross-gen tier ... (session 13)")."""
    others = {g: c for g, c in sorted(cal.collectives.items()) if g != gpu.key}
    lib = collective_library(vendor)
    if lib is not None and vendor_of is not None:
        def same_lib(g: str) -> bool:
            other = collective_library(vendor_of(g))
            return other is None or other == lib
        others = {g: c for g, c in others.items() if same_lib(g)}
        if not others:
            return {}
    if gpu.fabric == "scaleup":
        same = [c for c in others.values() if link_kind(c.fabric) == gpu.fabric]
        return pooled_alpha_beta(same or list(others.values()))
    return pooled_alpha_beta(list(others.values()))
