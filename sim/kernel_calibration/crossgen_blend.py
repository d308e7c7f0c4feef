"""A cross-gen group model that pools *predictions*, not parameters.

Each measured GPU's fitted group model (base parameters and, for the families in
:data:`RESIDUAL_FAMILIES`, its residual ensemble) is evaluated with the *target's*
specification figures and shape features, and the member predictions are combined by a
weighted geometric mean (weights: similarity of the GPUs' figures,
:func:`llmplan.sim.kernel_calibration.crossgen.similarity_weights`).

Why predictions rather than parameters: a GPU's eight base parameters are fitted jointly
(a high launch floor goes with a low per-wave cost, and so on), so a geometric mean of them
taken parameter by parameter is a model no GPU was fitted as. And a GPU's residual ensemble
is expressed in GPU-normalised features (waves over the SM count, working set over L2,
compute/memory time ratio: :mod:`llmplan.sim.kernel_calibration.features`), so it carries
the *shape -> efficiency* corrections of that GPU's kernels to the target's spec, which a
pooled parameter set cannot. Leave-one-GPU-out on the seven measured GPUs
(docs/ACCURACY.md, "Cross-gen tier") chose this form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmplan.sim.kernel_calibration import crossgen_kv_guard as KV
from llmplan.sim.kernel_calibration import crossgen_prior as P
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.family_model import GroupModel
from llmplan.sim.kernel_calibration.gbt import GBTModel
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import predict_us, predict_us_scalar

#: members whose weight is below this share are dropped (renormalised): speed only (a
#: GB200 query evaluates B200's model alone instead of three), the prediction moves by
#: about the dropped weight times the members' log disagreement (~1%)
MIN_WEIGHT = 0.01
#: cap on one member's log residual correction on the target (ln 2: at most a factor of 2
#: either way). A larger correction is a quirk of that GPU's kernels in a corner of its
#: shape space (a kernel switch, a fallback path), which does not transfer to another
#: GPU: leave-one-GPU-out with the H100/H200 twin also left out, MLA decode on the H100
#: went to 258% MAPE uncapped, 76% capped (46% for the parameter average). Mean over the
#: 57 (GPU, compute family) cells: 33.8% uncapped, 31.6% capped (docs/ACCURACY.md).
RESIDUAL_CAP = math.log(2.0)
#: cap on how far the pooled model (:mod:`crossgen_gemm`) may move the members' log mean
#: (0.15: about 16% either way). Uncapped, its small-m GEMM answers carried the other GPUs'
#: engine fixed costs: on L40S / RTX PRO 6000 bf16 GEMMs with m <= 64 its MAPE was 51-60%
#: against 14-17% for the members. Chosen leave-one-GPU-out on the six GPUs other than B200
#: (GEMM mean 24.1 -> 22.5% with the twins in, 26.7 -> 26.1% with H100/H200 each without the
#: other; caps 0.1-0.3 and pooled weights 0.5-1 all within 0.3 points; docs/ACCURACY.md).
POOLED_CAP = 0.15


@dataclass
class BlendGroupModel(GroupModel):
    """``base``/``rows``/``ranges`` describe the pool (weighted mean parameters, summed rows,
    union of shape ranges); predictions come from ``members`` ((group model, weight, use its
    residual ensemble) triples, weights summing to 1)."""

    members: tuple[tuple[GroupModel, float, bool], ...] = field(default=())
    #: a model pooled over the GPUs (``log_us_frame(phys)`` / ``log_us_one(phys)``: log latency
    #: in us): it moves the members' log mean by ``pooled_weight`` x its difference from that
    #: mean, the difference capped at +-:data:`POOLED_CAP`
    pooled: Any = None
    pooled_weight: float = 0.0
    #: the prior's share (:mod:`crossgen_prior`) and what it needs: the family (its roofline
    #: constants) and the members dropped under MIN_WEIGHT (the prior's equal-weight pool
    #: takes every member)
    prior_share: float = 0.0
    family: str = ""
    dropped: tuple[tuple[GroupModel, bool], ...] = field(default=())
    #: members whose fp8-KV answers are bounded by their 16-bit-KV ones (:mod:`crossgen_kv_guard`),
    #: and the target's figures that rebuild a query's 16-bit-KV terms
    guarded: tuple[GroupModel, ...] = field(default=())
    target: GPUFeatures | None = None

    @staticmethod
    def of(base_model: GroupModel, members: list[tuple[GroupModel, float]], residual: bool,
           pooled: Any = None, pooled_weight: float = 0.0, prior_share: float = 0.0,
           family: str = "", guarded: tuple[GroupModel, ...] = (),
           target: GPUFeatures | None = None) -> "BlendGroupModel":
        """``prior_share`` under MIN_WEIGHT counts as none (speed, as for members); ``guarded``
        applies only to :data:`crossgen_kv_guard.KV_GUARD_FAMILIES` with a ``target``."""
        keep = [(m, w) for m, w in members if w >= MIN_WEIGHT] or list(members)
        total = sum(w for _, w in keep)
        use_r = lambda m: bool(residual and m.gbt is not None and m.gbt.n_trees)  # noqa: E731
        mem = tuple((m, w / total, use_r(m)) for m, w in keep)
        pw = float(pooled_weight) if pooled is not None else 0.0
        share = float(prior_share) if prior_share >= MIN_WEIGHT and family in P.ROOFLINE else 0.0
        kept = {id(m) for m, _ in keep}
        dropped = tuple((m, use_r(m)) for m, _ in members if id(m) not in kept) if share else ()
        guard = tuple(guarded) if family in KV.KV_GUARD_FAMILIES and target is not None else ()
        return BlendGroupModel(base_model.base, None, base_model.rows, base_model.ranges, mem,
                               pooled if pw > 0 else None, pw, share, family, dropped, guard, target)

    def _is_guarded(self, m: GroupModel) -> bool:
        return any(m is g for g in self.guarded)

    def predict_frame(self, phys: F.Phys, gbt: GBTModel | None = None, use: np.ndarray | None = None) -> np.ndarray:
        """Latency in ms for every row (``gbt``/``use`` are ignored: members use their own)."""
        need_x = any(r for _, _, r in self.members) or any(r for _, r in self.dropped)
        x = F.feature_matrix(phys) if need_x else None
        kv_rows = KV.fp8_kv_rows(phys) if self.guarded else None
        phys16 = KV.bf16_kv_phys(phys, self.target) if kv_rows is not None and kv_rows.any() else None
        x16 = F.feature_matrix(phys16) if phys16 is not None and need_x else None

        def log_us(m: GroupModel, r: bool, ph: F.Phys, xx: np.ndarray | None) -> np.ndarray:
            lt = np.log(predict_us(m.base, ph))
            return lt + np.clip(m.gbt.predict(xx), -RESIDUAL_CAP, RESIDUAL_CAP) if r else lt

        def member_log(m: GroupModel, r: bool) -> np.ndarray:
            lt = log_us(m, r, phys, x)
            if phys16 is not None and self._is_guarded(m):
                lt = np.where(kv_rows, np.minimum(lt, log_us(m, r, phys16, x16)), lt)
            return lt

        logs = [member_log(m, r) for m, _, r in self.members]
        log_t = sum(w * lt for (_, w, _), lt in zip(self.members, logs))
        if self.pooled is not None:
            shift = np.clip(self.pooled.log_us_frame(phys) - log_t, -POOLED_CAP, POOLED_CAP)
            log_t = log_t + self.pooled_weight * shift
        if self.prior_share > 0:
            logs += [member_log(m, r) for m, r in self.dropped]
            prior = (P.PRIOR_ROOFLINE_SHARE * P.roofline_log_us(self.family, phys)
                     + (1.0 - P.PRIOR_ROOFLINE_SHARE) * sum(logs) / len(logs))
            log_t = (1.0 - self.prior_share) * log_t + self.prior_share * prior
        return np.exp(log_t) / 1e3

    def predict_one(self, phys: F.Phys, gbt: GBTModel | None = None) -> tuple[float, str]:
        """(latency ms, dominant bound of the heaviest member) for one shape."""
        x = np.array(phys.x, dtype=np.float64)
        phys16 = KV.bf16_kv_phys(phys, self.target) if self.guarded and KV.fp8_kv_rows(phys) else None

        def log_us(m: GroupModel, r: bool, ph: F.Phys) -> tuple[float, str]:
            t, b = predict_us_scalar(m.base, ph.t_c, ph.t_m, ph.q, ph.ws_l2, ph.t_l2, ph.waves)
            xx = x if ph is phys else np.array(ph.x, dtype=np.float64)
            return (math.log(t) + min(max(m.gbt.predict_one(xx), -RESIDUAL_CAP), RESIDUAL_CAP) if r
                    else math.log(t)), b

        def member_log(m: GroupModel, r: bool) -> tuple[float, str]:
            lt, b = log_us(m, r, phys)
            if phys16 is not None and self._is_guarded(m):
                lt = min(lt, log_us(m, r, phys16)[0])
            return lt, b

        log_t, bound, best, logs = 0.0, "latency", -1.0, []
        for m, w, r in self.members:
            lt, b = member_log(m, r)
            log_t += w * lt
            logs.append(lt)
            if w > best:
                best, bound = w, b
        if self.pooled is not None:
            shift = min(max(self.pooled.log_us_one(phys) - log_t, -POOLED_CAP), POOLED_CAP)
            log_t = log_t + self.pooled_weight * shift
        if self.prior_share > 0:
            logs += [member_log(m, r)[0] for m, r in self.dropped]
            prior = (P.PRIOR_ROOFLINE_SHARE * P.roofline_log_us(self.family, phys)
                     + (1.0 - P.PRIOR_ROOFLINE_SHARE) * sum(logs) / len(logs))
            log_t = (1.0 - self.prior_share) * log_t + self.prior_share * prior
        return math.exp(log_t) / 1e3, bound
