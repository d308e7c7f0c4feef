"""Fit a :class:`~llmplan.sim.kernel_calibration.calib_file.Calibration` to measured kernel latencies.

For every measured (GPU, engine, operator family, dtype group):

1. the base model (:mod:`llmplan.sim.kernel_calibration.physics`: launch floor + soft roofline with tile/wave
   quantization and warm-L2 terms) by robust least squares on log latency, then
2. a boosted oblivious-tree ensemble (:mod:`llmplan.sim.kernel_calibration.gbt`) on the log residual, over
   the family's shape features (:mod:`llmplan.sim.kernel_calibration.features`).

Collectives get measured curves and alpha-beta parameters (:mod:`llmplan.sim.kernel_calibration.collectives`).
Large tables are subsampled deterministically (a keyed random generator per group).

Residual statistics for error bands are computed honestly: the measured tier from a
grouped split (models refitted without 20% of the shape groups, tested on them), the
cross-gen tier leave-one-GPU-out (each measured GPU predicted from the others only).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import pandas as pd

from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration import moe_routing
from llmplan.sim.kernel_calibration.calib_file import Calibration
from llmplan.sim.kernel_calibration.collectives import GPUCollectives, fit_gpu_collectives
from llmplan.sim.kernel_calibration import attention_kernels as AK
from llmplan.sim.kernel_calibration import moe_kernels as MK
from llmplan.sim.kernel_calibration.family_model import (GROUP_COLUMN, FamilyModel, GroupModel, group_keys, row_kernels,
                                                         shape_ranges)
from llmplan.sim.kernel_calibration.gbt import GBTModel, GBTParams, fit_gbt
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import PRIOR_WEIGHT, BaseParams, fit_base, predict_us
from llmplan.calibration import kernel_bands
from llmplan.calibration.reader import Measurements
from llmplan.calibration.splits import Split, group_ids, held_out_mask

CODE_VERSION = "calibration-1"
ATTRIBUTION = ("Fitted to kernel latencies measured by NVIDIA's aiconfigurator-core 0.12.0 performance "
               "database (Apache License 2.0); see sim/kernel_calibration/data/NOTICE.md.")

Progress = Callable[[str, int, int], None]   # (label, done, total)


@dataclass(frozen=True)
class FamilyCaps:
    """Fit effort of one operator family (rows above a cap are a deterministic sample)."""

    max_rows_base: int       # rows per group for the base least squares
    max_rows_gbt: int        # rows per group for the residual ensemble
    n_trees: int             # most trees per residual ensemble
    rows_per_tree: int = 80  # ensembles get ~rows/rows_per_tree trees (<= n_trees)


#: families fitted with more rows and trees than ``FitOptions``' defaults: GEMM and attention
#: have the most rows per group (9,000 to ~75,000) and missed their targets at 4,000 / 8,000
#: rows and <= 100 trees. Grouped split (--split grouped:0.2:1), MAPE %: GEMM L40S 7.9 -> 6.9,
#: A100 5.7 -> 5.1, B200 6.2 -> 5.7, B60 6.7 -> 6.1 (6.6 -> 6.1 with seed 2); prefill
#: attention B200 8.5 -> 7.1; decode attention B200 8.1 -> 6.7, L40S 9.0 -> 7.4 (at 16,000
#: rows, 160 trees), RTX PRO 6000 9.1 -> 6.7. The other families are small or limited by the
#: held-out configurations, not by rows (docs/ACCURACY.md "Kernel model").
_BIG = FamilyCaps(max_rows_base=16000, max_rows_gbt=32000, n_trees=250, rows_per_tree=40)
FAMILY_CAPS: tuple[tuple[str, FamilyCaps], ...] = (("gemm", _BIG), ("attention_prefill", _BIG),
                                                   ("attention_decode", _BIG))


@dataclass(frozen=True)
class FitOptions:
    gbt: GBTParams = field(default_factory=lambda: GBTParams(n_trees=100))
    # Caps chosen so that a fit of all seven GPUs' tables (~8M rows, ~300 groups) and its
    # held-out refit take minutes on 2 cores; rows above a cap are a deterministic sample
    max_rows_base: int = 4000        # rows per group for the base least squares
    max_rows_gbt: int = 8000         # rows per group for the residual ensemble
    rows_per_tree: int = 80          # ensembles get ~rows/rows_per_tree trees (<= gbt.n_trees)
    workers: int = 1                 # processes (results do not depend on it)
    min_trees: int = 30
    min_rows_gbt: int = 60           # below this a group keeps its base model only
    few_configs: float = 8.0         # groups with fewer shape configurations lean on the pooled prior
    residual_split: Split = Split("grouped", 0.2, 0)
    # the measured-tier bands of the families with few shape groups (BAND_EXTRA_FAMILIES) come
    # from a grouped K-fold of residual_split, K = 1 / its fraction (calibration/kernel_bands.py)
    residuals: bool = True           # compute residual statistics (needs a second fit)
    spec_rows: int = 4000            # rows per (family, GPU) scored for the roofline's error band
    crossgen_rows: int = 40000       # rows per (family, GPU) scored leave-one-GPU-out
    fit_date: str = "unspecified"
    family_caps: tuple[tuple[str, FamilyCaps], ...] = FAMILY_CAPS
    moe_form: str = F.MOE_FORM       # MoE work terms (features.MOE_FORMS), recorded in the file
    # MoE dtype groups whose rows mix kernel families also get one model per family
    # (_kernel_items; sim.kernel_calibration.moe_kernels), used by queries naming their kernel
    moe_kernel_groups: bool = True

    def caps(self, family: str) -> FamilyCaps:
        """The family's fit effort: its ``family_caps`` entry, else the defaults above."""
        for fam, c in self.family_caps:
            if fam == family:
                return c
        return FamilyCaps(self.max_rows_base, self.max_rows_gbt, self.gbt.n_trees, self.rows_per_tree)


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=4).digest(), "little")


def _subsample(n: int, cap: int, seed: int) -> np.ndarray:
    if n <= cap:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, cap, replace=False))


def _take(phys: F.Phys, idx: np.ndarray) -> F.Phys:
    pick = lambda v: np.asarray(v)[idx] if np.ndim(v) else v  # noqa: E731
    return F.Phys(pick(phys.t_c), pick(phys.t_m), pick(phys.q), pick(phys.ws_l2), pick(phys.t_l2),
                  pick(phys.waves), None, None, [pick(v) for v in phys.x])


#: features the residual ensembles never split on, per family. They stay in the feature
#: vector (so calibration files fitted before keep their indices) but are held constant
#: when fitting. MoE: the expert-configuration identity (hidden, inter, top-k, expert
#: count). With them the trees memorise the configurations they saw and carry one
#: configuration's kernel quirks to an unseen one; without them the residual is a function
#: of tokens per expert, touched experts, dtype, sharding and the roofline terms only.
#: Measured on the grouped split (--split grouped:0.2:1, MoE MAPE): H100 43.1 -> 25.9%,
#: H200 47.3 -> 26.9%, B200 26.0 -> 17.9% (A100/L40S/RTX PRO 6000 within +-2 points).
RESIDUAL_EXCLUDE: dict[str, tuple[str, ...]] = {
    "moe": ("log_hidden", "log_inter_local", "log_topk", "log_local_experts"),
}


def residual_features(family: str, phys: F.Phys) -> np.ndarray:
    """The residual ensembles' training matrix: :func:`features.feature_matrix` with the
    family's :data:`RESIDUAL_EXCLUDE` columns held at 0 (never split on)."""
    x = F.feature_matrix(phys)
    drop = [i for i, n in enumerate(F.FEATURES[family]) if n in RESIDUAL_EXCLUDE.get(family, ())]
    if drop:
        x = x.copy()
        x[:, drop] = 0.0
    return x


def fit_group(family: str, df: pd.DataFrame, gpu: GPUFeatures, opts: FitOptions, seed: int,
              prior: BaseParams | None = None, with_gbt: bool = True) -> GroupModel:
    """Base parameters and residual ensemble of one (GPU, engine, family, group).

    ``prior``: the engine's pooled fit over all groups of the family. Groups covering few
    shape configurations (e.g. one MoE expert configuration) are shrunk towards it
    strongly, so the base model still extrapolates like its siblings."""
    phys = F.frame_phys(family, df, gpu, opts.moe_form)
    y_us = df["latency_ms"].to_numpy(dtype=np.float64) * 1e3
    caps = opts.caps(family)
    ib = _subsample(len(df), caps.max_rows_base, seed)
    weight = PRIOR_WEIGHT
    if prior is not None:
        n_cfg = group_ids(family, df).nunique()
        weight = PRIOR_WEIGHT * max(1.0, opts.few_configs / max(n_cfg, 1))
    base = fit_base(_take(phys, ib), y_us[ib], max_rows=len(ib) + 1, prior=prior, prior_weight=weight)
    base = BaseParams.from_dict(base.to_dict())   # exactly what the JSON file will hold
    gbt = None
    if with_gbt and len(df) >= opts.min_rows_gbt:
        ig = _subsample(len(df), caps.max_rows_gbt, seed + 1)
        sub = _take(phys, ig)
        resid = np.log(y_us[ig] / predict_us(base, sub))
        n_trees = int(np.clip(len(df) / caps.rows_per_tree, opts.min_trees, caps.n_trees))
        gbt = fit_gbt(residual_features(family, sub), resid, list(F.FEATURES[family]),
                      replace(opts.gbt, n_trees=n_trees, seed=seed % (2 ** 31))).rounded()
    return GroupModel.from_dict(GroupModel(base, gbt, len(df), shape_ranges(family, df)).to_dict())


def fit_pooled_base(family: str, df: pd.DataFrame, gpu: GPUFeatures, opts: FitOptions, seed: int) -> BaseParams:
    """One base fit over every dtype group of an engine's family (the groups' prior)."""
    idx = _subsample(len(df), opts.caps(family).max_rows_base, seed)
    sub = df.iloc[idx]
    return fit_base(F.frame_phys(family, sub, gpu, opts.moe_form), sub["latency_ms"].to_numpy(dtype=np.float64) * 1e3,
                    max_rows=len(idx) + 1)


def _work_items(meas: Measurements) -> list[tuple[str, str, str, str, pd.DataFrame]]:
    items = []
    for family in F.COMPUTE_FAMILIES:
        df = meas.family(family)
        if not len(df):
            continue
        keys = group_keys(family, df)
        for (gpu, backend, group), idx in df.groupby([df["gpu"], df["backend"], keys], sort=True).groups.items():
            items.append((str(gpu), str(backend), family, str(group), df.loc[idx]))
    return items


def _kernel_items(items: list[tuple[str, str, str, str, pd.DataFrame]]
                  ) -> tuple[list[tuple[str, str, str, str, pd.DataFrame]], dict[tuple[str, str, str, str], tuple[str, ...]]]:
    """MoE: the rows of each kernel family of a dtype group whose rows mix kernel families
    (:mod:`llmplan.sim.kernel_calibration.moe_kernels`), as further work items keyed
    ``dtype/family``, and the kernel families of every MoE dtype group; the same for the
    attention tables (:mod:`attention_kernels`, key ``all/<kernel_source>``). Rows without a
    ``kernel_source`` label (family None) stay in their dtype group only, and a group holding any
    records no kernel families (unknown: FamilyModel.resolve_group)."""
    extra, kernels = [], {}
    for gpu, backend, family, group, df in items:
        if family != "moe" and family not in AK.FAMILIES:
            continue
        fams = row_kernels(family, df)
        labels = fams.tolist()
        uniq = tuple(sorted({f for f in labels if f is not None}))
        if uniq and None not in labels and family == "moe":   # attention: resolve_group needs none
            kernels[(gpu, backend, family, group)] = uniq
        if len(uniq) > 1:
            for fam in uniq:
                extra.append((gpu, backend, family, MK.kernel_group_key(group, fam), df[fams == fam]))
    return extra, kernels


#: families that also get one residual ensemble over all dtype groups of an engine (used
#: for configurations outside a group's own range, see FamilyModel)
SHARED_GBT_FAMILIES = ("moe",)


def fit_shared_gbt(family: str, parts: list[tuple[pd.DataFrame, GroupModel]], gpu: GPUFeatures,
                   opts: FitOptions, seed: int) -> GBTModel | None:
    """One residual ensemble over the rows of every group (each against its own base)."""
    xs, rs = [], []
    total = sum(len(df) for df, _ in parts)
    caps = opts.caps(family)
    for i, (df, gm) in enumerate(parts):
        cap = max(1, int(round(caps.max_rows_gbt * len(df) / max(total, 1))))
        idx = _subsample(len(df), cap, seed + i)
        sub = df.iloc[idx]
        phys = F.frame_phys(family, sub, gpu, opts.moe_form)
        xs.append(residual_features(family, phys))
        rs.append(np.log(sub["latency_ms"].to_numpy(dtype=np.float64) * 1e3 / predict_us(gm.base, phys)))
    if total < opts.min_rows_gbt:
        return None
    n_trees = int(np.clip(total / caps.rows_per_tree, opts.min_trees, caps.n_trees))
    return fit_gbt(np.vstack(xs), np.concatenate(rs), list(F.FEATURES[family]),
                   replace(opts.gbt, n_trees=n_trees, seed=seed % (2 ** 31))).rounded()


#: work items of the running fit, inherited by forked worker processes (never pickled)
_WORK: list[Any] = []


def _run_work(i: int) -> Any:
    fn, args = _WORK[i]
    return fn(*args)


def _map(tasks: list[tuple[Callable[..., Any], tuple[Any, ...]]], workers: int,
         progress: Progress | None = None, label: Callable[[int], str] = str) -> list[Any]:
    """Results of ``fn(*args)`` for every task, in task order. With ``workers`` > 1 the tasks
    run in forked processes; each is a pure function of its inputs (seeds included), so the
    result is identical to the serial run."""
    if workers <= 1 or len(tasks) < 2:
        out = []
        for i, (fn, args) in enumerate(tasks):
            if progress:
                progress(label(i), i, len(tasks))
            out.append(fn(*args))
        return out
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    global _WORK
    _WORK = tasks
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as pool:
            out = []
            for i, res in enumerate(pool.map(_run_work, range(len(tasks)), chunksize=1)):
                if progress:
                    progress(label(i), i, len(tasks))
                out.append(res)
            return out
    finally:
        _WORK = []


def _warm_moe_routing(meas: Measurements) -> None:
    """Evaluate the MoE routing load of every measured shape once, before worker processes
    fork (they inherit the cache instead of each recomputing it; results do not depend on it)."""
    df = meas.family("moe")
    if len(df):
        moe_routing.routing_load_arrays(df["num_tokens"], df["num_experts"], df["topk"], df["moe_ep"], df["skew"])


def fit_measured(meas: Measurements, gpus: dict[str, GPUFeatures], opts: FitOptions,
                 progress: Progress | None = None) -> dict[str, dict[str, dict[str, FamilyModel]]]:
    items = _work_items(meas)
    if opts.workers > 1 and opts.moe_form in (F.MOE_FORM_ROUTED, F.MOE_FORM_ROUTED_MASKED):
        _warm_moe_routing(meas)
    # 1. the engine's pooled base fit over all dtype groups of a family (the groups' prior)
    prior_keys: list[tuple[str, str, str]] = sorted({(g, b, f) for g, b, f, _, _ in items})
    prior_tasks = []
    for gpu, backend, family in prior_keys:
        fam = meas.family(family)
        rows = fam[(fam["gpu"] == gpu) & (fam["backend"] == backend)]
        multi = GROUP_COLUMN.get(family) is not None and rows[GROUP_COLUMN[family]].nunique() > 1
        prior_tasks.append((_pooled_or_none, (multi, family, rows.reset_index(drop=True), gpus[gpu], opts,
                                              _seed(gpu, backend, family))))
    priors = dict(zip(prior_keys, _map(prior_tasks, opts.workers, progress,
                                       lambda i: "prior " + " ".join(prior_keys[i]))))
    # 2. every (GPU, engine, family, dtype group), then the MoE kernel groups (_kernel_items)
    n_plain = len(items)
    kitems, group_kernels = _kernel_items(items) if opts.moe_kernel_groups else ([], {})
    items = items + kitems
    group_tasks = [(fit_group, (family, df.reset_index(drop=True), gpus[gpu], opts,
                                _seed(gpu, backend, family, group), priors[(gpu, backend, family)]))
                   for gpu, backend, family, group, df in items]
    fitted = _map(group_tasks, opts.workers, progress, lambda i: " ".join(items[i][:4]))
    out: dict[str, dict[str, dict[str, FamilyModel]]] = {}
    shared: dict[tuple[str, str, str], list[tuple[pd.DataFrame, GroupModel]]] = {}
    for i, ((gpu, backend, family, group, df), gm) in enumerate(zip(items, fitted)):
        key = (gpu, backend, family)
        fm = out.setdefault(gpu, {}).setdefault(backend, {}).setdefault(family, FamilyModel(family, {}, work_form=opts.moe_form))
        if i >= n_plain:            # a kernel group: not in the shared ensemble, not a dtype group
            fm.kernel_groups[group] = gm
            continue
        if family in SHARED_GBT_FAMILIES and priors[key] is not None:
            shared.setdefault(key, []).append((df.reset_index(drop=True), gm))
        fm.groups[group] = gm
        if family in AK.FAMILIES and opts.moe_kernel_groups:
            # the engine's kernel per head configuration, where its table mixes kernels: the rule
            # that gives queries (and scored rows) their kernel group (attention_kernels)
            labels = row_kernels(family, df)
            if len({k for k in labels.tolist() if k is not None}) > 1:
                fm.head_kernels = AK.head_kernel_lookup(df, labels)
        if (gpu, backend, family, group) in group_kernels:
            fm.group_kernels[group] = group_kernels[(gpu, backend, family, group)]
    # 3. the shared residual ensembles
    shared_keys = sorted(shared)
    shared_fits = _map([(fit_shared_gbt, (k[2], shared[k], gpus[k[0]], opts, _seed(*k, "shared")))
                        for k in shared_keys], opts.workers, progress, lambda i: "shared " + " ".join(shared_keys[i]))
    for (gpu, backend, family), gbt in zip(shared_keys, shared_fits):
        out[gpu][backend][family].shared_gbt = gbt
    if progress:
        progress("done", len(items), len(items))
    return out


def _pooled_or_none(multi: bool, family: str, df: pd.DataFrame, gpu: GPUFeatures, opts: FitOptions,
                    seed: int) -> BaseParams | None:
    return fit_pooled_base(family, df, gpu, opts, seed) if multi else None


def fit_collectives(meas: Measurements, gpus: dict[str, GPUFeatures]) -> dict[str, GPUCollectives]:
    out = {}
    empty = pd.DataFrame()
    for gpu in sorted(gpus):
        pick = lambda fam: (meas.family(fam)[meas.family(fam)["gpu"] == gpu]  # noqa: E731
                            if len(meas.family(fam)) else empty)
        custom, nccl, a2a = pick("custom_allreduce"), pick("nccl"), pick("moe_a2a")
        if len(custom) or len(nccl) or len(a2a):
            g = gpus[gpu]
            out[gpu] = fit_gpu_collectives(g.fabric, g.fabric_bw_gbps, custom, nccl, a2a)
    return out


def split_measurements(meas: Measurements, split: Split) -> tuple[Measurements, Measurements]:
    """(train, test) copies of the measurements under a split, family by family."""
    train, test = {}, {}
    for fam, df in meas.frames.items():
        m = held_out_mask(fam, df, split)
        train[fam], test[fam] = df[~m].reset_index(drop=True), df[m].reset_index(drop=True)
    return (Measurements(meas.root, train, meas.sources, meas.gpu_specs),
            Measurements(meas.root, test, meas.sources, meas.gpu_specs))


def without_gpu(meas: Measurements, gpu: str) -> Measurements:
    frames = {f: d[d["gpu"] != gpu].reset_index(drop=True) for f, d in meas.frames.items()}
    return Measurements(meas.root, {f: d for f, d in frames.items() if len(d)},
                        [s for s in meas.sources if s.gpu != gpu],
                        {k: v for k, v in meas.gpu_specs.items() if k != gpu})


def ape_stats(pred: np.ndarray, meas_ms: np.ndarray) -> dict[str, float]:
    ok = np.isfinite(pred)
    if not ok.any():
        return {"rows": 0}
    e = np.abs(pred[ok] / meas_ms[ok] - 1.0)
    return {"rows": int(ok.sum()), "mape": round(float(e.mean()), 5), "p50_ape": round(float(np.median(e)), 5),
            "p90_ape": round(float(np.quantile(e, 0.9)), 5)}


#: families with few shape groups per GPU: their measured-tier bands come from a grouped K-fold
#: in which every configuration is held out once (calibration/kernel_bands.py)
BAND_EXTRA_FAMILIES = kernel_bands.BAND_EXTRA_FAMILIES


def residual_stats(cal: Calibration, test: Measurements, tier: str, method: str,
                   max_rows: int | None = None,
                   extra: list[tuple[Calibration, Measurements]] = ()) -> dict[str, dict[str, Any]]:
    """APE statistics per family (and per GEMM/MoE dtype ``family:dtype``, per GPU
    ``family@gpu``, pooled "collective" and "all" compute families) of ``cal`` on ``test``
    rows, pooled with those of every further (calibration, test rows) pair in ``extra``;
    tier "spec" scores the roofline.
    ``max_rows`` caps the rows scored per (family, GPU) with a deterministic sample."""
    collected: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for c, t in [(cal, test), *extra]:
        _collect_residuals(c, t, tier, max_rows, collected)
    out = {}
    for fam, parts in sorted(collected.items()):
        p = np.concatenate([a for a, _ in parts]) if parts else np.zeros(0)
        y = np.concatenate([b for _, b in parts]) if parts else np.zeros(0)
        st = ape_stats(p, y)
        if st.get("rows"):
            out[fam] = {**st, "method": method}
    return out


def _collect_residuals(cal: Calibration, test: Measurements, tier: str, max_rows: int | None,
                       collected: dict[str, list[tuple[np.ndarray, np.ndarray]]]) -> None:
    from llmplan.sim.kernel_calibration.predict import predict_frame, roofline_predict

    for fam, df in sorted(test.frames.items()):
        for gpu, sub in df.groupby("gpu", sort=True):
            if max_rows is not None and len(sub) > max_rows:
                sub = sub.sample(n=max_rows, random_state=0).sort_index()
            if tier == "spec":
                if fam == "moe_a2a":
                    continue
                pred = roofline_predict(fam, sub, test.gpu_specs[str(gpu)])
                used = np.where(np.isfinite(pred), "spec", "none")
            else:
                spec = test.gpu_specs[str(gpu)]
                pred, used = predict_frame(cal, fam, sub, GPUFeatures.from_spec(spec),
                                           "cross-gen" if tier == "cross-gen" else None, spec=None)
            keep = used == tier
            y = sub["latency_ms"].to_numpy()
            collected.setdefault(fam, []).append((pred[keep], y[keep]))
            collected.setdefault(f"{fam}@{gpu}", []).append((pred[keep], y[keep]))
            if "dtype" in sub and fam in ("gemm", "moe"):
                for dt in sorted(sub["dtype"].unique()):
                    m = (sub["dtype"] == dt).to_numpy() & keep
                    collected.setdefault(f"{fam}:{dt}", []).append((pred[m], y[m]))
            if fam in ("custom_allreduce", "nccl"):
                collected.setdefault("collective", []).append((pred[keep], y[keep]))
                collected.setdefault(f"collective@{gpu}", []).append((pred[keep], y[keep]))
            if fam in F.COMPUTE_FAMILIES:
                collected.setdefault("all", []).append((pred[keep], y[keep]))


def fit_calibration(meas: Measurements, opts: FitOptions = FitOptions(), progress: Progress | None = None
                    ) -> Calibration:
    """The full fit: measured models, collectives, residual statistics, provenance."""
    t0 = time.perf_counter()
    gpus = {k: GPUFeatures.from_spec(s) for k, s in sorted(meas.gpu_specs.items())}
    cal = Calibration(gpus=gpus)
    cal.measured = fit_measured(meas, gpus, opts, progress)
    cal.collectives = fit_collectives(meas, gpus)
    if opts.residuals:
        train, test = split_measurements(meas, opts.residual_split)
        sub_progress = (lambda label, i, n: progress(f"residuals: {label}", i, n)) if progress else None
        held = Calibration(gpus=gpus, measured=fit_measured(train, gpus, opts, sub_progress),
                           collectives=fit_collectives(train, gpus))
        cal.residuals["measured"] = residual_stats(held, test, "measured", f"split {opts.residual_split}",
                                                   max_rows=opts.crossgen_rows)
        # the few-configuration families' bands: every configuration held out once, in-range rows
        pairs = kernel_bands.fold_pairs(meas, gpus, opts, (fit_measured, fit_collectives), progress,
                                        first=(held, test))
        cal.residuals["measured"] = kernel_bands.replace_band_stats(cal.residuals["measured"], kernel_bands.band_stats(
            pairs, opts.residual_split, opts.crossgen_rows, residual_stats))
        if len(gpus) > 1:
            cal.residuals["cross-gen"] = residual_stats(cal, meas, "cross-gen", "leave-one-GPU-out",
                                                        max_rows=opts.crossgen_rows)
        cal.residuals["spec"] = residual_stats(cal, meas, "spec", "roofline (sim.kernels) on measured rows",
                                               max_rows=opts.spec_rows)
    cal.provenance = {
        "tool": "llmplan calibrate",
        "code_version": _code_version(),
        "fit_date": opts.fit_date,
        "attribution": ATTRIBUTION,
        "data": [{"path": s.path, "gpu": s.gpu, "table": s.table, "rows": s.rows, "sha256": s.sha256}
                 for s in sorted(meas.sources, key=lambda s: s.path)],
        "rows": meas.rows(),
        "options": {"max_rows_base": opts.max_rows_base, "max_rows_gbt": opts.max_rows_gbt,
                    "gbt": {"n_trees_max": opts.gbt.n_trees, "depth": opts.gbt.depth,
                            "learning_rate": opts.gbt.learning_rate, "l2": opts.gbt.l2, "n_bins": opts.gbt.n_bins,
                            "subsample": opts.gbt.subsample, "rows_per_tree": opts.rows_per_tree},
                    "family_caps": {f: {"max_rows_base": c.max_rows_base, "max_rows_gbt": c.max_rows_gbt,
                                        "n_trees_max": c.n_trees, "rows_per_tree": c.rows_per_tree}
                                    for f, c in opts.family_caps},
                    "residual_split": str(opts.residual_split),
                    "band_method": kernel_bands_method(opts),
                    "residual_exclude": {k: list(v) for k, v in sorted(RESIDUAL_EXCLUDE.items())},
                    "crossgen_rows": opts.crossgen_rows,
                    "spec_rows": opts.spec_rows},
    }
    if progress:
        progress(f"fitted in {time.perf_counter() - t0:.0f}s", 1, 1)
    return cal


def kernel_bands_method(opts: FitOptions) -> str:
    """The few-configuration families' band method, as recorded in the provenance."""
    return kernel_bands.METHOD.format(k=kernel_bands.n_folds(opts.residual_split), split=opts.residual_split)


def _code_version() -> str:
    try:
        from llmplan import __version__
    except ImportError:  # pragma: no cover
        __version__ = "unknown"
    return f"llmplan {__version__} / {CODE_VERSION}"
