"""Which fitted model answers a kernel query, and with which tier: the one implementation.

Both evaluators of a calibration use this module and nothing else to decide:

* :class:`llmplan.sim.calibrated.CalibratedKernelModel` (one protocol query at a time: what
  ``plan`` and ``simulate`` use), and
* :func:`llmplan.sim.kernel_calibration.predict.predict_frame` (whole measured tables at
  once: what ``validate kernels`` and the residual statistics of ``calibrate`` use), which is a
  vectorised application of the same candidates in the same order.

Tiers, decided once per GPU by :func:`choose_tier`:

* ``measured``: the calibration holds this GPU with the same performance figures;
* ``sibling``: a measured GPU with the same compute silicon stands in, evaluated with this
  GPU's own figures (see :func:`llmplan.sim.kernel_calibration.crossgen.sibling_gpu`);
* ``cross-gen``: the pooled model of the measured GPUs, from the specification only.

Per family, :func:`family_candidates` lists the models to try in order: the stand-in GPU's
model for the asked engine, else for another engine measured on it; then the cross-gen
pool. A query takes the first candidate that has a dtype group for it; a query no candidate
covers is timed by the roofline (tier ``spec``) by the caller.

Collectives: :class:`CollectiveSource` answers from the stand-in GPU's measured curves when
its links are the measured ones, else from its alpha-beta parameters, else from the pooled
alpha-beta of the measured GPUs (cross-gen).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from llmplan.sim.kernel_calibration.calib_file import Calibration
from llmplan.sim.kernel_calibration.collectives import (AlphaBeta, GPUCollectives, a2a_key, custom_key,
                                                        lookup_alpha_beta, nccl_key)
from llmplan.sim.kernel_calibration.crossgen import crossgen_alpha_beta, crossgen_family, sibling_gpu
from llmplan.sim.kernel_calibration.family_model import FamilyModel
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

TIER_ORDER = ("measured", "sibling", "cross-gen", "spec")
#: values of ``force`` accepted by :func:`choose_tier` (None: the tier users get)
FORCEABLE = ("cross-gen",)
#: relative tolerance on link figures under which a stand-in's measured curves are used
LINK_RTOL = 0.005


def catalog_vendor(key: str) -> str | None:
    """Vendor of a catalog GPU (None when the catalog does not know it)."""
    try:
        from llmplan.hardware_catalog.loader import get_gpu
        return str(get_gpu(key).vendor)
    except Exception:  # noqa: BLE001 - a calibration GPU outside the catalog: vendor unknown
        return None


@dataclass(frozen=True)
class Candidate:
    model: FamilyModel
    tier: str
    features: GPUFeatures     # the figures the model is evaluated with
    backend: str              # the engine whose fitted kernels answer ("pooled" for cross-gen)


@dataclass
class TierChoice:
    """The tier of one GPU under one calibration, and where its answers come from."""

    cal: Calibration
    gpu: GPUFeatures                  # the target's own figures
    tier: str                         # measured | sibling | cross-gen
    source_gpu: str | None            # measured GPU whose parameters stand in (None: cross-gen)
    features: GPUFeatures             # figures stand-in models are evaluated with
    vendor: str | None = None         # the target's vendor (cross-gen pools that vendor's GPUs first)
    _own_cands: dict[tuple[str, str], Candidate | None] = field(default_factory=dict, repr=False)
    _orders: dict[tuple[str, str | None], tuple[str, ...]] = field(default_factory=dict, repr=False)
    _pool: dict[tuple[str, str], Candidate | None] = field(default_factory=dict, repr=False)
    _collectives: "CollectiveSource | None" = field(default=None, repr=False)

    def candidates(self, family: str, backend: str, prefer: str | None = None) -> Iterator[Candidate]:
        """Models to try in order for a family: the stand-in GPU's model for the asked engine,
        then for its other measured engines (a dtype group one engine lacks; ``prefer``'s
        first when given), then the cross-gen pool. Lazy: another engine's model (a section
        file reads each engine's families when first asked for) and the pool (which reads
        every measured GPU) are built only when a query reaches them."""
        order = self._order(backend, prefer)
        for b in order:
            cand = self._own_one(family, b)
            if cand is not None:
                yield cand
        pool = self.pool(family, backend)
        if pool is not None:
            yield pool

    def _order(self, backend: str, prefer: str | None) -> tuple[str, ...]:
        """The stand-in GPU's engines in the order :meth:`candidates` tries them (cached)."""
        key = (backend, prefer)
        hit = self._orders.get(key)
        if hit is None:
            order = [backend] + [b for b in self.cal.backends(self.source_gpu) if b != backend] \
                if self.source_gpu else []
            if prefer is not None:
                rank = {backend: 0, prefer: 1}
                order = sorted(order, key=lambda b: rank.get(b, 2))
            hit = self._orders[key] = tuple(order)
        return hit

    def _own_one(self, family: str, b: str) -> Candidate | None:
        """The stand-in GPU's candidate for one engine (cached; None: not fitted)."""
        key = (family, b)
        if key in self._own_cands:
            return self._own_cands[key]
        fm = self.cal.family_model(self.source_gpu, b, family) if self.source_gpu else None
        cand = self._own_cands[key] = None if fm is None else Candidate(fm, self.tier, self.features, b)
        return cand

    def pool(self, family: str, backend: str) -> Candidate | None:
        """The cross-gen candidate (built once per family and engine)."""
        key = (family, backend)
        if key not in self._pool:
            exclude = None if self.tier == "measured" else self.gpu.key
            xg = crossgen_family(self.cal, family, backend, exclude=exclude, target=self.gpu,
                                 vendor=self.vendor, vendor_of=catalog_vendor)
            self._pool[key] = None if xg is None else Candidate(xg, "cross-gen", self.gpu, "pooled")
        return self._pool[key]

    def own(self, family: str, backend: str) -> list[Candidate]:
        """The stand-in GPU's candidates, asked engine first (reads every engine's model)."""
        return [c for c in (self._own_one(family, b) for b in self._order(backend, None)) if c is not None]

    @property
    def collectives(self) -> "CollectiveSource":
        if self._collectives is None:
            self._collectives = CollectiveSource.for_choice(self)
        return self._collectives


def choose_tier(cal: Calibration, gpu: GPUFeatures, vendor: str | None = None,
                vendor_of: Callable[[str], str | None] | None = catalog_vendor,
                force: str | None = None) -> TierChoice:
    """The tier ``gpu`` gets from ``cal``. ``force="cross-gen"`` ignores the GPU's own and
    any sibling's parameters (leave-one-GPU-out validation of the cross-gen tier)."""
    if force is not None and force not in FORCEABLE:
        raise ValueError(f"cannot force tier '{force}' (forceable: {', '.join(FORCEABLE)})")
    if vendor is None and vendor_of is not None:
        vendor = vendor_of(gpu.key)
    if force == "cross-gen":
        return TierChoice(cal, gpu, "cross-gen", None, gpu, vendor)
    stored = cal.gpus.get(gpu.key)
    if stored is not None and stored.same_hardware(gpu) and (gpu.key in cal.measured or gpu.key in cal.collectives):
        return TierChoice(cal, gpu, "measured", gpu.key, stored, vendor)
    src = sibling_gpu(cal, gpu, vendor, vendor_of)
    if src is not None:
        return TierChoice(cal, gpu, "sibling", src, gpu, vendor)
    return TierChoice(cal, gpu, "cross-gen", None, gpu, vendor)


@dataclass
class CollectiveSource:
    """Where a GPU's collective times come from (see the module docstring)."""

    choice: TierChoice
    own: GPUCollectives | None        # the stand-in GPU's measurements
    curves_ok: bool                   # its measured curves apply (links are the measured ones)
    _pooled: dict[str, AlphaBeta] | None = None
    _found: dict[tuple[str, str, str, int, str], tuple[AlphaBeta, str] | None] = field(default_factory=dict,
                                                                                         repr=False)

    @staticmethod
    def for_choice(choice: TierChoice) -> "CollectiveSource":
        own = choice.cal.collectives.get(choice.source_gpu) if choice.source_gpu else None
        src_feat = choice.cal.gpus.get(choice.source_gpu) if choice.source_gpu else None
        ok = own is not None and src_feat is not None and all(
            abs(getattr(src_feat, f) - getattr(choice.gpu, f)) <= LINK_RTOL * max(getattr(choice.gpu, f), 1e-9)
            for f in ("scaleup_bw_gbps", "pcie_bw_gbps"))
        return CollectiveSource(choice, own, ok)

    @property
    def fabric(self) -> str:
        return self.choice.features.fabric

    def custom_ar(self, backend: str, mode: str, n: int, nbytes: float) -> tuple[float, bool] | None:
        """(ms, inside the measured range) from the engine's custom all-reduce curves (the
        asked engine's, else another engine's in the same launch mode); None if not measured."""
        if not self.curves_ok or self.own is None:
            return None
        cs = self.own.custom_ar
        keys = [custom_key(backend, mode)] + sorted(k for k in cs.curves if k.endswith("|" + mode))
        for key in keys:
            res = cs.predict_one(key, n, nbytes)
            if res is not None:
                return res
        return None

    def nccl(self, op: str, dtype: str, n: int, nbytes: float) -> tuple[float, bool] | None:
        if not self.curves_ok or self.own is None:
            return None
        return self.own.nccl.predict_one(nccl_key(op, dtype), n, nbytes)

    def moe_a2a(self, row: dict[str, Any]) -> tuple[float, bool] | None:
        if not self.curves_ok or self.own is None:
            return None
        n = int(row["ep"])
        res = self.own.moe_a2a.predict_one(a2a_key(row), n, float(row["num_tokens"]))
        return res if res is not None else _a2a_nearest(self.own, row, n)

    def alpha_beta(self, kind: str, op: str, dtype: str, n: int, mode: str = "graph"
                   ) -> tuple[AlphaBeta, str] | None:
        """(parameters, tier): the stand-in GPU's own fit, else the pooled cross-gen fit
        (remembered per query: the tables do not change)."""
        key = (kind, op, dtype, n, mode)
        if key not in self._found:
            self._found[key] = self._alpha_beta(kind, op, dtype, n, mode)
        return self._found[key]

    def _alpha_beta(self, kind: str, op: str, dtype: str, n: int, mode: str) -> tuple[AlphaBeta, str] | None:
        if self.own is not None:
            ab = lookup_alpha_beta(self.own.alpha_beta, kind, op, dtype, n, mode)
            if ab is not None:
                return ab, self.choice.tier
        if self._pooled is None:
            self._pooled = crossgen_alpha_beta(self.choice.cal, self.choice.gpu, self.choice.vendor, catalog_vendor)
        ab = lookup_alpha_beta(self._pooled, kind, op, dtype, n, mode)
        return (ab, "cross-gen") if ab is not None else None


def roofline_dtype(spec: Any, dtype: str) -> str:
    """A dtype the specification roofline can time on this GPU (fp8_block -> fp8, 4-bit
    formats -> fp4 where the GPU has fp4 tensor cores; what it lacks runs in bf16)."""
    d = {"fp8_block": "fp8", "int4_wo": "int4", "w4a16_mxfp4": "fp4", "w4a8_mxfp4_mxfp8": "fp4",
         "w4a8_mxfp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4"}.get(dtype, dtype)
    return d if spec.supports(d) else "bf16"


def spec_mla_bmm(roof: Any, num_tokens: int, num_heads: int, dtype: str, kv_lora_rank: int = 512,
                 qk_nope_dim: int = 128) -> Any:
    """Specification roofline (``roof``: a RooflineKernelModel) of an MLA absorb matmul."""
    from llmplan.sim.kernel_calibration.features import DTYPE_BYTES
    from llmplan.sim.kernels import GEMM_ETA_COMPUTE, MEM_ETA

    flops = 2.0 * num_tokens * num_heads * qk_nope_dim * kv_lora_rank
    nbytes = num_heads * qk_nope_dim * kv_lora_rank * DTYPE_BYTES.get(dtype, 2.0) \
        + num_tokens * num_heads * (qk_nope_dim + kv_lora_rank) * 2.0
    return roof._roof(flops, nbytes, roofline_dtype(roof.gpu, dtype), GEMM_ETA_COMPUTE, MEM_ETA)


def spec_gdn(roof: Any, phase: str, batch: int, seq_len: int, k_heads: int, head_k_dim: int, v_heads: int,
             head_v_dim: int, conv_kernel: int = 4) -> Any:
    """Specification tier of a Gated DeltaNet layer's token mixing: the roofline model's own
    ``gdn`` (``roof``: a RooflineKernelModel; one implementation, constants documented there).
    ``phase`` is "prefill" or "decode"."""
    return roof.gdn("context" if phase == "prefill" else "generation", batch, seq_len if phase == "prefill" else 1,
                    max(k_heads, 1), v_heads, head_k_dim, head_v_dim, conv_kernel)


def _a2a_nearest(own: GPUCollectives, row: dict[str, Any], n: int) -> tuple[float, bool] | None:
    """An all-to-all configuration never measured: the measured curve of the same DeepEP
    mode whose bytes per token (hidden x topk) are closest, with the token axis scaled by
    the bytes ratio (fixed cost kept, bandwidth part scaled); never "inside"."""
    prefix = f"{row['comm_backend']}|{row['phase']}|"
    want = float(row["hidden"]) * float(row["topk"])
    best, best_d = None, math.inf
    for key in sorted(own.moe_a2a.curves):
        if not key.startswith(prefix) or not key.endswith(f"|{int(row.get('sms', 0))}"):
            continue
        _, _, h, k, _, _ = key.split("|")
        d = abs(math.log(float(h) * float(k) / want))
        if d < best_d:
            best, best_d = key, d
    if best is None:
        return None
    _, _, h, k, _, _ = best.split("|")
    res = own.moe_a2a.predict_one(best, n, float(row["num_tokens"]) * want / (float(h) * float(k)))
    return None if res is None else (res[0], False)
