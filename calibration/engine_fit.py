"""Engine-level terms fitted to measured serving runs.

Step time of a replica (``sim/step_model.py``, terms documented in ``sim/engine_terms.py``)::

    step = max(device_ms, c x seqs) + h0 + h1 x seqs   (+ (s - 1) x prefill device time)

Per engine (vllm, sglang, trtllm) and, where enough deployments were measured, per engine
version family (:func:`version_family`), we fit

* ``host_overhead_ms`` (h0): per-step host time not hidden behind the GPU;
* ``host_overlap_per_seq_ms`` (c): per-sequence CPU work overlapped with the device step
  (asynchronous / overlap schedulers), chosen from :data:`OVERLAP_GRID`;
* ``osl_jitter`` (j): the engine's *desynchronisation*, chosen from :data:`JITTER_GRID` by the cost of
  the model as written (engine-wide and per-version family terms fitted at each j, :func:`model_cost`);
* ``eager_step_ms_per_layer`` (e): host launch time per layer of a step that runs without CUDA
  graphs (``sim.cuda_graphs.eager_step``: steps carrying a prompt on TensorRT-LLM and SGLang,
  steps above the largest capture size); a constant per eager step, bounded by
  :data:`EAGER_BOUNDS`, never per sequence;

* ``ttft_per_request_ms`` and ``ttft_per_prompt_token_ms`` (r0, r1): per-request time outside the
  steps (API server, client round trip, tokenisation), added to TTFT only: ``--request-terms``
  (:data:`REQUEST_FORMS`, default constant + prompt); they enter the coefficients as 1 and the
  row's isl, so they need no extra simulation;

by minimising the squared log error of mean TTFT and mean TPOT (robust ``soft_l1``).
``host_overhead_per_seq_ms`` (h1) is per-sequence time that adds to the step (not hidden behind
the device). Forms (:data:`FORMS`): ``overlap`` (h1 = 0; :data:`SHIPPED_FORM`), ``linear`` (c = 0)
and ``overlap+linear`` (c from the grid *and* h1 free, a diagnostic). In both grid forms c is kept
above 0 only where the rows identify it (:func:`overlap_identified`, a likelihood-ratio test against
c = 0): on the training rows (N <= 352 once the regimes are left out) the cost was flat in c to
0.03% for SGLang, so a plain grid search ended on its top value 0.08 by a rounding-level margin, and
0.08 x 512 sequences = 41 ms made every SGLang Llama-3.1-8B TP1-TP8 row at N = 512 a 42.7 ms step
while the measured TPOT falls with TP (docs/ACCURACY.md, "Engine terms at large batch (session 8)").
The shipped form keeps h1 = 0: a linear per-sequence term grows without bound outside the fitted
batch range (issue 12: 0.031 ms x 4,000 sequences = 124 ms per step; the session-8 overlap+linear
fit gave vLLM 0.054 ms, 110 ms per step at 2,048 sequences), while the overlapped term only shows
where the CPU work is longer than the device step. A ``prefill_scale`` (s) can be added with ``--prefill-scale``.

Desynchronisation: N identical closed-loop clients stay in lock-step forever in a
deterministic simulator, while a real engine and client drift apart. The simulator breaks
lock-step by drawing output lengths uniformly in ``osl x [1 - j, 1 + j]`` (mean unchanged).
``--engine-jitter ENGINE=J`` simulates an engine only at its own values (half the work when its
value is known from earlier fits).

The step model the bases come from carries the other composition terms: CUDA-graph padding
(``sim/cuda_graphs.py``), TensorRT-LLM's GUARANTEED_NO_EVICT capacity scheduler and the reuse of
preempted requests' blocks (``sim/scheduler.py``, ``sim/kv_cache.py``); the MoE routing skew is in
the calibrated MoE query.

Scheduling policy of the measured runs (:data:`SCHEDULER`, engines' documented defaults):
SGLang does not mix prefill chunks into decode batches unless started with
``--enable-mixed-chunk`` (off by default), so it runs prefill batches first; TensorRT-LLM's
``enable_chunked_prefill`` is off by default (TorchLlmArgs), so whole prompts join the
in-flight batch next to the decodes (``whole_prompts``).

Method (exact, and fast): in a closed loop without think time, one replica with ``pp=1``
makes the same scheduling decisions whatever the step durations are: requests arrive
only when others finish, i.e. at step boundaries, so the sequence of batches depends on
step counts alone. Every request's TTFT and TPOT is a *linear* function of the step-time
function, and so are their means. For each overlap value c of the grid one DES run with
step time ``max(device, c x seqs)`` gives the base, and probe runs (1 ms per step; 1 ms per
sequence; prefill device time) give the coefficients of h0, h1 and s: the DES result for any
parameters on the grid is a dot product (``tests/test_validate_serving.py`` checks the
identity against direct simulation).

Hold-out: rows are split into halves *by deployment* (:func:`deployment_half`: every row of a
deployment, i.e. the same engine, version, model, GPU, precision, parallelism, isl and osl at
any concurrency, lies in the same half; a keyed hash of the deployment and the seed decides).
Terms fitted on the training half are scored on the other half; the shipped values are then
fitted on all rows. The served-latency bands (:mod:`calibration.serving_bands`) come from the
held-out residuals.

Regimes: ``--exclude-regimes`` leaves out of the fit the rows :mod:`calibration.serving_regimes`
flags (cache-served prompts, admission-limited, server-queued, below the decode floor; criteria
from the row and the simulator, never from the error). On in the shipped fit since the late refit
of 2026-11-24: those rows' latency is set by something the replay does not model, so they must not
pull the host terms (docs/ACCURACY.md, "Held-out results"); every held-out figure still scores them.

Run: ``python -m llmplan.calibration.engine_fit --measurements DIR_OR_FILES... --out FILE``
(``--out sim/data/engine_profiles.json`` updates the shipped fit), or
``llmplan validate serving --measurements ... --fit-engines``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from llmplan.calibration.engine_versions import release
from llmplan.calibration.serving_rows import (BACKENDS, SIMULATED, ServingCase, SimOptions, concurrency_of,
                                              engine_profiles, map_row, map_rows, parallel_map,
                                              read_serving_files, resolve_calibration, serving_files, simulate_case)
from llmplan.errors import UserError
from llmplan.sim.engine_terms import PATH as SHIPPED_PROFILES
from llmplan.sim.types import StepShape

#: the file the runtime reads (written only when named with --out / --fit-out)
SHIPPED = SHIPPED_PROFILES
#: (lower, upper) bounds of (h0 ms, h1 ms, prefill scale)
BOUNDS = ((0.0, 50.0), (0.0, 2.0), (0.25, 4.0))
#: soft_l1 scale of the log residuals (about 25% error before the loss turns linear)
F_SCALE = 0.25
#: desynchronisation values tried per engine (osl_jitter, see the module docstring)
JITTER_GRID = (0.0, 0.02)
#: (lower, upper) bound of the eager-step launch time, ms per layer (a PyTorch-flow forward launches
#: some 10-30 kernels per layer; 1 ms per layer would be 30-100 us of host time per kernel)
EAGER_BOUNDS = (0.0, 1.0)
#: overlapped per-sequence CPU times tried (ms per sequence per step)
OVERLAP_GRID = (0.0, 0.01, 0.02, 0.03, 0.05, 0.08)
#: scheduling policy of the measured engine versions where it differs from conf/engine
SCHEDULER: dict[str, dict[str, Any]] = {"sglang": {"chunked_prefill": False}, "trtllm": {"whole_prompts": True}}
#: scheduler fields a profile file may set
SCHEDULER_KEYS = ("chunked_prefill", "whole_prompts")
#: bumped whenever the simulated coefficients change meaning (invalidates --bases-cache files);
#: 5: TensorRT-LLM overlap scheduler (sim/trtllm_scheduling.py) changes the replayed steps
#: 6: SGLang generator rows capture every decode batch up to N (calibration/sglang_launch.py)
#: 7: vLLM gpt-oss sweep rows capture graphs up to 2,048 tokens (calibration/vllm_launch.py)
#: 8: TensorRT-LLM Qwen3-MoE norms in the all-reduce (sim/trtllm_fusions.py) and Llama fp8 qkv /
#:    gate_up on fp8 inputs (sim/trtllm_fp8_inputs.py) change the replayed steps
#: 9: a prequantized fp8 GEMM is never slower than the plain one (CalibratedKernelModel.gemm_prequantized)
#: 10: DSA sparse-MLA prefill runs padded heads over every index slot (sim/kernels.py, FLASHMLA_SPARSE_HEADS)
#: 11: TensorRT-LLM Llama layer 0's qkv quantizes its own input (sim/trtllm_fp8_inputs.py, review)
#: 12: vLLM 0.12.0 collection rows replay aiperf's pool of 100 prompts (calibration/benchmark_clients.py)
#: 13: TensorRT-LLM collection rows take aiconfigurator's harness token budget (calibration/trtllm_launch.py)
#: 14: TensorRT-LLM decode-only MLA steps take the measured whole module (sim/trtllm_mla_module.py)
#: 15: TensorRT-LLM Llama-3.1-70B sweep rows take InferenceX's launch (max_num_tokens 16,384; batch
#:     waiting at 1k/1k, TP < 8: calibration/trtllm_sweep_launch.py, sim/trtllm_batch_wait.py)
#: 16: (session 10) the InferenceX DeepSeek-R1 launch budget and SGLang sweep launches, SGLang's admission
#: 17: the vLLM gpt-oss 0.18 sweep rows' Marlin MXFP4 MoE (sim/vllm_marlin_mxfp4.py), the GEMM weight copies of
#:     the collectors in the kernel calibration (sim/kernel_calibration/features.py), the Dynamo front end of
#:     the SGLang generator rows (sim/frontend_ceiling.py)
#: 18: the MoE kernel family of each query (sim/kernel_calibration/moe_kernels.py) and the regenerated kernel
#:     calibration, vLLM async scheduling (sim/vllm_async_scheduling.py), the InferenceX gpt-oss TRT-LLM
#:     2025-11-02 rows' EP layout (calibration/trtllm_inferencex_layout.py)
#: 19: the session-13 kernel calibration: MoE tuned/default Triton configurations, masked remote pairs, K
#:     alignment and the collector clamp of SGLang 0.5.10 (sim/kernel_calibration/moe_tuned.py, features.py);
#:     the collectors' GEMM working sets and activation quantization (features.py); the engine's attention
#:     kernel per head configuration (sim/kernel_calibration/attention_kernels.py)
BASIS_VERSION = 19
#: model forms: which terms are free (module docstring)
FORMS = ("overlap", "linear", "overlap+linear")
#: the form of the shipped fit (engine-wide and per version family)
SHIPPED_FORM = "overlap"
#: chi-square(1 degree of freedom) 95% quantile: the likelihood-ratio threshold of one added term
#: (Wilks' theorem; any statistics text, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.4)
LR_CHI2_1DF_95 = 3.841
#: per-request TTFT terms fitted (``--request-terms``): none, a constant, or a constant and a per
#: prompt-token term (sim/engine_terms.py); they add to TTFT only and need no extra simulation
REQUEST_FORMS = {"none": (), "constant": ("ttft_per_request_ms",),
                 "constant+prompt": ("ttft_per_request_ms", "ttft_per_prompt_token_ms")}
REQUEST_DEFAULT = "constant+prompt"
#: (lower, upper) bounds of the per-request terms: ms, and ms per prompt token
REQUEST_BOUNDS = {"ttft_per_request_ms": (0.0, 500.0), "ttft_per_prompt_token_ms": (0.0, 0.05)}
REQUEST_BOUNDS_ORDER = ("ttft_per_request_ms", "ttft_per_prompt_token_ms")
#: whether version families refit the per-request TTFT terms (else they keep the engine's)
FAMILY_REQUEST_TERMS = True
#: a version family gets its own terms when its training rows span at least this many deployments
FAMILY_MIN_DEPLOYMENTS = 6


def version_family(backend: str, version: str) -> str:
    """Engine-version family of a served row. Numbered releases split where the measured
    versions change behaviour (vLLM 0.11-0.12 / 0.16+, SGLang 0.5.1-0.5.6 / 0.5.8+,
    TRT-LLM 1.0-1.1 / 1.2+); non-numeric builds (``gpt-oss-dev``, ``glm5-hopper``) are ``dev``."""
    v = release(version)
    if v is None:
        return "dev"
    split = {"vllm": (0, 14, 0), "sglang": (0, 5, 7), "trtllm": (1, 2, 0)}.get(backend)
    if split is None:
        return "all"
    lo = ".".join(str(x) for x in split[:2]) if split[2] == 0 else ".".join(str(x) for x in split)
    return f"<{lo}" if v < split else f">={lo}"


def deployment_half(deployment: str, seed: int) -> int:
    """0 (train) or 1 (test): a keyed hash of the deployment key and the seed (independent of
    row order, the same for every run)."""
    h = hashlib.sha256(f"{seed}:{deployment}".encode()).digest()
    return h[0] & 1


@dataclass(frozen=True)
class EngineParams:
    """The fitted engine-level terms."""

    host_overhead_ms: float
    host_overhead_per_seq_ms: float = 0.0
    host_overlap_per_seq_ms: float = 0.0
    prefill_scale: float = 1.0
    osl_jitter: float = 0.0
    ttft_per_request_ms: float = 0.0        # per-request TTFT outside the steps (sim/engine_terms.py)
    ttft_per_prompt_token_ms: float = 0.0   # per prompt token (tokenisation)
    eager_step_ms_per_layer: float = 0.0    # per layer of a step without CUDA graphs
    frontend_per_token_ms: float = 0.0      # Dynamo front end, per streamed token (rows of FRONTEND_ROWS only)


# ----------------------------------------------------------------------------- cost models


def prefill_extra_ms(step: Any, shape: StepShape) -> float:
    """Marginal device time of a step's prefill chunks: the step minus its decode part
    (host time excluded; the step model's engine must have zero host terms)."""
    if not shape.prefill_seqs:
        return 0.0
    dec = StepShape(0, 0, 0.0, 0, shape.decode_seqs, shape.decode_kv_tokens)
    return max(0.0, step.step_time_ms(shape) - step.step_time_ms(dec))


class PrefillScaled:
    """A step cost model whose prefill chunks cost ``scale`` times their marginal time."""

    def __init__(self, step: Any, scale: float):
        self.step, self.scale, self.pp = step, float(scale), step.pp
        self._bare = _bare(step)

    def step_time_ms(self, shape: StepShape) -> float:
        return self.step.step_time_ms(shape) + (self.scale - 1.0) * prefill_extra_ms(self._bare, shape)

    def stage_time_ms(self, shape: StepShape) -> float:
        return self.step.stage_time_ms(shape) + (self.scale - 1.0) * prefill_extra_ms(self._bare, shape) / self.pp

    def request_ttft_ms(self, prompt_tokens: float) -> float:
        return self.step.request_ttft_ms(prompt_tokens)

    def breakdown(self, shape: StepShape) -> Any:
        return self.step.breakdown(shape)


def _bare(step: Any) -> Any:
    """The analytical step model with zero host terms (same kernels)."""
    from llmplan.sim.step_model import AnalyticalStepModel

    e = replace(step.engine, **NO_HOST)
    return AnalyticalStepModel(step.model, step.gpu, step.par, step.prec, e, step.kernels)


def corrected(scale: float) -> Callable[[Any], Any] | None:
    """The wrap for :func:`calibration.serving_rows.simulate_case` applying a prefill scale."""
    if abs(scale - 1.0) < 1e-12:
        return None
    return lambda step: PrefillScaled(step, scale)


class _Probe:
    """Cost model returning one basis function of the shape (pp = 1 only)."""

    pp = 1

    def __init__(self, step: Any, kind: str):
        self.step, self.kind = step, kind

    def step_time_ms(self, shape: StepShape) -> float:
        if self.kind == "steps":
            return 1.0
        if self.kind == "seqs":
            return float(max(1, shape.decode_seqs + shape.prefill_seqs))
        if self.kind == "eager":  # +1: step times must be > 0
            return 1.0 + float(self.step.eager_layers(shape))
        return 1.0 + prefill_extra_ms(self.step, shape)   # "prefill" (+1: step times must be > 0)

    stage_time_ms = step_time_ms


# ----------------------------------------------------------------------------- basis


@dataclass(frozen=True)
class Basis:
    """Linear coefficients of one row. For overlap value ``OVERLAP_GRID[k]``:
    mean = base[k] + h0 steps + h1 seqs + (s - 1) prefill (TTFT and TPOT alike), plus the
    per-request terms on TTFT (:meth:`request_ms`)."""

    index: int
    backend: str
    family: str
    deployment: str
    model: str
    dense: bool
    gpu: str
    concurrency: int
    isl: int
    osl: int
    measured_ttft_ms: float
    measured_tpot_ms: float
    ttft_base: tuple[float, ...]
    tpot_base: tuple[float, ...]
    ttft: tuple[float, float, float]     # (steps, seqs, prefill) coefficients
    tpot: tuple[float, float, float]
    tier: str
    grid: tuple[float, ...] = OVERLAP_GRID
    eager: tuple[float, float] = (0.0, 0.0)   # (TTFT, TPOT) coefficients of eager_step_ms_per_layer
    frontend: bool = False   # served behind the Dynamo front end (:func:`tag_frontend_rows`)

    def overlap_of(self, p: EngineParams) -> float:
        """The per-sequence floor of this row's steps under ``p``: the overlapped CPU term, or the
        front end's per-token time where larger on a front-end row (sim/frontend_ceiling.py: both
        give ``max(device, x x seqs)``, so the overlap grid's runs are the front end's)."""
        return max(p.host_overlap_per_seq_ms, p.frontend_per_token_ms) if self.frontend else p.host_overlap_per_seq_ms

    def base(self, c: float) -> tuple[float, float]:
        """Base means at overlap ``c`` (linear interpolation between grid values)."""
        g = self.grid
        k = int(np.searchsorted(g, c))
        if k < len(g) and abs(g[k] - c) < 1e-12:
            return self.ttft_base[k], self.tpot_base[k]
        k = min(max(k, 1), len(g) - 1)
        w = (c - g[k - 1]) / (g[k] - g[k - 1])
        return ((1 - w) * self.ttft_base[k - 1] + w * self.ttft_base[k],
                (1 - w) * self.tpot_base[k - 1] + w * self.tpot_base[k])

    def predict(self, p: EngineParams) -> tuple[float, float]:
        t0, p0 = self.base(self.overlap_of(p))
        x = np.array([p.host_overhead_ms, p.host_overhead_per_seq_ms, p.prefill_scale - 1.0])
        e = p.eager_step_ms_per_layer
        return (t0 + float(np.dot(self.ttft, x)) + e * self.eager[0] + self.request_ms(p),
                p0 + float(np.dot(self.tpot, x)) + e * self.eager[1])

    def request_ms(self, p: EngineParams) -> float:
        """The per-request TTFT terms of ``p`` for this row's prompt (TPOT is unchanged: they
        shift the first token and the last alike)."""
        return p.ttft_per_request_ms + p.ttft_per_prompt_token_ms * self.isl


def zero_host(case: ServingCase) -> ServingCase:
    """The case with the engine's host and per-request terms removed (the ``base`` probe)."""
    e = replace(case.dep.engine, **NO_HOST)
    return replace(case, dep=replace(case.dep, engine=e))


def basis_for(case: ServingCase, opts: SimOptions, grid: tuple[float, ...] = OVERLAP_GRID,
              prefill: bool = False) -> Basis | str:
    """DES runs of one case (one per overlap value, two or three probes) -> its linear
    coefficients, or a status string."""
    if case.dep.par.pp != 1:
        return "invalid: pipeline parallel rows are not used by the engine fit (schedule depends on timing)"
    base = zero_host(case)
    runs = []
    floor = _decode_floor_ms(base, opts)
    for c in grid:
        if c * case.concurrency <= floor and runs:
            runs.append(runs[0])   # the overlapped CPU work never exceeds a step: same run as c = 0
        elif c == 0.0:
            runs.append(simulate_case(base, opts))
        else:
            e = replace(base.dep.engine, host_overlap_per_seq_ms=c)
            runs.append(simulate_case(replace(base, dep=replace(base.dep, engine=e)), opts))
    kinds = ("steps", "seqs", "eager") + (("prefill",) if prefill else ())
    for kind in kinds:
        runs.append(simulate_case(base, opts, wrap=lambda s, k=kind: _Probe(s, k)))
    for r in runs:
        if r.status != SIMULATED:
            return r.status
    n = len(grid)
    t = [r.ttft_ms for r in runs]
    p = [r.tpot_ms for r in runs]
    pf_t = t[n + 3] - t[n] if prefill else 0.0
    pf_p = p[n + 3] - p[n] if prefill else 0.0
    return Basis(case.index, case.backend, version_family(case.backend, case.version), case.deployment,
                 case.dep.model.key, case.dense, case.dep.gpu.key, case.concurrency, case.isl, case.osl,
                 case.measured_ttft_ms, case.measured_tpot_ms, tuple(t[:n]), tuple(p[:n]),
                 (t[n], t[n + 1], pf_t), (p[n], p[n + 1], pf_p), runs[0].tier, tuple(grid),
                 (t[n + 2] - t[n], p[n + 2] - p[n]))


def _decode_floor_ms(case: ServingCase, opts: SimOptions) -> float:
    """Device time of a decode step of ``concurrency`` sequences at the prompt length: no step
    of the run with n <= concurrency sequences is shorter than n / concurrency of it (a step's
    device time is affine in its sequences with a positive weight-read intercept, and prefill
    and longer KV only add), so an overlapped CPU term c x n <= c x concurrency below it never
    shows."""
    from llmplan.calibration.serving_rows import step_model

    n = case.concurrency
    step = step_model(case, opts.calibration)
    return float(step.step_time_ms(StepShape(0, 0, 0.0, 0, n, n * case.isl)))


def _basis_task(task: tuple[dict, int, dict, SimOptions, tuple[float, ...], bool]) -> Basis | str:
    row, index, overrides, opts, grid, prefill = task
    m = map_row(row, index, engine_profiles(overrides))
    if m.case is None:
        return m.status
    return basis_for(m.case, opts, grid, prefill)


def compute_bases(rows: list[dict], indices: list[int], opts: SimOptions, workers: int = 2,
                  progress: Callable[[int, int], None] | None = None,
                  overrides: dict[str, dict[str, Any]] | None = None, grid: tuple[float, ...] = OVERLAP_GRID,
                  prefill: bool = False) -> list[Basis | str]:
    """Bases of the given rows (parallel); ``overrides`` as for :func:`engine_profiles`."""
    ov = SCHEDULER if overrides is None else overrides
    return parallel_map(_basis_task, [(rows[i], i, ov, opts, grid, prefill) for i in indices], workers, progress)


# ----------------------------------------------------------------------------- fit and scores


@dataclass(frozen=True)
class Errors:
    """Absolute percentage errors of mean TTFT and TPOT over a set of rows (fractions)."""

    rows: int
    ttft_mape: float
    ttft_median: float
    ttft_p90: float
    tpot_mape: float
    tpot_median: float
    tpot_p90: float


def ape_stats(pred: np.ndarray, meas: np.ndarray) -> tuple[float, float, float]:
    """(MAPE, median APE, p90 APE) as fractions; NaN when empty."""
    ok = np.isfinite(pred) & np.isfinite(meas) & (meas > 0)
    if not ok.any():
        return math.nan, math.nan, math.nan
    e = np.abs(pred[ok] / meas[ok] - 1.0)
    return float(e.mean()), float(np.median(e)), float(np.quantile(e, 0.9))


def score(bases: list[Basis], p: EngineParams | Callable[[Basis], EngineParams]) -> Errors:
    """Errors of ``bases`` under fixed terms, or under ``p(basis)`` (per-family terms)."""
    if not bases:
        nan = math.nan
        return Errors(0, nan, nan, nan, nan, nan, nan)
    pick = p if callable(p) else (lambda b: p)
    pred = np.array([b.predict(pick(b)) for b in bases])
    mt = np.array([b.measured_ttft_ms for b in bases])
    mp = np.array([b.measured_tpot_ms for b in bases])
    return Errors(len(bases), *ape_stats(pred[:, 0], mt), *ape_stats(pred[:, 1], mp))


def fit_params(bases: list[Basis], start: EngineParams, prefill_scale: bool = False,
               form: str = SHIPPED_FORM, request: str = REQUEST_DEFAULT, eager: bool = True) -> EngineParams:
    """Best terms of ``form`` (:data:`FORMS`: over the overlap grid, the linear form, or both with
    the overlap kept only where identified, :func:`overlap_identified`); ``request`` names
    the per-request TTFT terms fitted with them (:data:`REQUEST_FORMS`); ``eager``: fit the
    eager-step term too (else the start's value is kept; ``--no-eager-term`` turns it off)."""
    return _fit_form(bases, start, prefill_scale, form, request, eager, frontend=True)[0]


def _fit_form(bases: list[Basis], start: EngineParams, prefill_scale: bool, form: str,
              request: str = REQUEST_DEFAULT, eager: bool = True, frontend: bool = False) -> tuple[EngineParams, float]:
    if form not in FORMS:
        raise UserError(f"unknown engine-term form '{form}'", key="--form", fix=f"one of {', '.join(FORMS)}")
    if request not in REQUEST_FORMS:
        raise UserError(f"unknown per-request TTFT terms '{request}'", key="--request-terms",
                        fix=f"one of {', '.join(REQUEST_FORMS)}")
    if not bases:
        return start, math.inf
    grid = (0.0,) if form == "linear" else bases[0].grid
    fe = start.frontend_per_token_ms
    if frontend and any(b.frontend for b in bases):
        fe = _fit_frontend(bases, start, prefill_scale, form, request, eager)
    fits = [fit_with_cost(bases, start, prefill_scale, overlap=c, per_seq=(form != "overlap"), request=request,
                          eager=eager, frontend=fe) for c in grid]
    best = min(fits, key=lambda f: f[1])   # first (smallest c) of equal costs
    if form != "linear" and grid[0] == 0.0 and not overlap_identified(fits[0][1], best[1], _residual_rows(bases)):
        return fits[0]
    return best


# --- the Dynamo front end's per-token time (sim/frontend_ceiling.py; session 11) -------------------
#: per streamed token times of the Dynamo front end tried (ms). The rows' Little's-law rate bounds it:
#: a front end of t ms per token delivers at most 1 / t tokens/s, and the SGLang generator rows
#: delivered up to 19.6k tokens/s (t <= 0.051 ms); the grid spans the overlap grid's range (10-80 us
#: per token: Python-level work per streamed item), values between the overlap grid's points
#: interpolate its runs (:meth:`Basis.base`)
FRONTEND_GRID = (0.0, 0.01, 0.02, 0.025, 0.03, 0.035, 0.04, 0.045, 0.05, 0.055, 0.06, 0.07, 0.08)


def _fit_frontend(bases: list[Basis], start: EngineParams, prefill_scale: bool, form: str, request: str,
                  eager: bool) -> float:
    """The Dynamo front end's per-token time: the value of :data:`FRONTEND_GRID` with the lowest cost
    at overlap 0 where the rows identify it (:func:`overlap_identified`, the same likelihood-ratio test
    as the overlap term's), else 0. Tested before the engine-wide overlap term: both floor a step at
    ``x x seqs`` and only the front-end rows reach batches where it shows (SGLang's other rows run at
    N <= 64), so the rows cannot tell them apart; the documented mechanism (a per-token GIL crossing in
    Dynamo's worker, ai-dynamo/dynamo PR #10609 and #7910) is the front end's, and the term keyed to it
    leaves the engine's other rows and every other front end unchanged."""
    fits = [fit_with_cost(bases, start, prefill_scale, overlap=0.0, per_seq=(form != "overlap"), request=request,
                          eager=eager, frontend=f) for f in FRONTEND_GRID]
    best = min(fits, key=lambda f: f[1])
    return best[0].frontend_per_token_ms if overlap_identified(fits[0][1], best[1], _residual_rows(bases)) else 0.0


def _residual_rows(bases: list[Basis]) -> float:
    """Log residuals of the fit over 2: the rows, less half a row for each kept for its TPOT only."""
    return len(bases) - sum(not math.isfinite(b.measured_ttft_ms) for b in bases) / 2


def overlap_identified(cost_zero: float, cost_best: float, rows: int) -> bool:
    """Whether an overlapped per-sequence term lowers the fit's cost enough to be told from c = 0:
    the likelihood-ratio statistic ``m ln(cost_0 / cost_c)`` of ``m = 2 x rows`` log residuals
    (TTFT and TPOT) above :data:`LR_CHI2_1DF_95`. On a flat cost (rows whose steps are never
    host-bound at any c of the grid) the grid search would otherwise return whichever c a
    rounding-level difference favours, often the grid's top."""
    if cost_zero <= cost_best:
        return False
    if cost_best <= 0.0:   # an exact fit at c > 0 that c = 0 misses
        return True
    return 2 * rows * math.log(cost_zero / cost_best) > LR_CHI2_1DF_95


def fit_with_cost(bases: list[Basis], start: EngineParams, prefill_scale: bool = False, overlap: float = 0.0,
                  per_seq: bool = True, request: str = REQUEST_DEFAULT,
                  eager: bool = True, frontend: float = 0.0) -> tuple[EngineParams, float]:
    """Least-squares fit of h0[, h1][, s][, e][, per-request TTFT terms] at a fixed overlap value;
    returns the terms and the final robust cost (comparable between fits of the same rows).
    ``eager``: fit the eager-step term (else it keeps the start's value)."""
    from scipy.optimize import least_squares

    if not bases:
        return start, math.inf
    B = np.array([b.base(max(overlap, frontend) if b.frontend else overlap) for b in bases])
    isl = np.array([float(b.isl) for b in bases])
    E = np.array([b.eager for b in bases])
    # columns: h0, h1, s - 1, e (eager ms per layer), per-request ms, per prompt token ms (the last
    # two on TTFT only)
    T = np.column_stack([np.array([b.ttft for b in bases]), E[:, 0], np.ones(len(bases)), isl])
    P = np.column_stack([np.array([b.tpot for b in bases]), E[:, 1], np.zeros((len(bases), 2))])
    y = np.log(np.concatenate([[b.measured_ttft_ms for b in bases], [b.measured_tpot_ms for b in bases]]))
    # rows kept for their TPOT only (measured TTFT NaN: front-end-bound, server-queued; exclude_regimes)
    # carry no TTFT residual
    w = np.isfinite(y).astype(float)
    y = np.where(w > 0, y, 0.0)
    req = [4 + REQUEST_BOUNDS_ORDER.index(k) for k in REQUEST_FORMS[request]]
    fixed = np.array([start.eager_step_ms_per_layer, start.ttft_per_request_ms, start.ttft_per_prompt_token_ms])
    free = [0] + ([1] if per_seq else []) + ([2] if prefill_scale else []) + ([3] if eager else []) + req
    bounds = list(BOUNDS) + [EAGER_BOUNDS] + [REQUEST_BOUNDS[k] for k in REQUEST_BOUNDS_ORDER]
    lo = np.array([bounds[i][0] for i in free])
    hi = np.array([bounds[i][1] for i in free])
    scale = np.array([1.0, 0.01, 0.1, 0.1, 10.0, 0.001])[free]

    def full(v: np.ndarray) -> np.ndarray:
        x = np.zeros(6)
        x[3:] = fixed   # terms not fitted here keep the start's values
        for i, k in enumerate(free):
            x[k] = v[i] - (1.0 if k == 2 else 0.0)
        return x

    def resid(v: np.ndarray) -> np.ndarray:
        x = full(v)
        pred = np.concatenate([B[:, 0] + T @ x, B[:, 1] + P @ x])
        return (np.log(np.maximum(pred, 1e-9)) - y) * w

    s0 = np.array([start.host_overhead_ms, start.host_overhead_per_seq_ms, start.prefill_scale,
                   start.eager_step_ms_per_layer, start.ttft_per_request_ms, start.ttft_per_prompt_token_ms])
    best = None
    for guess in (s0, np.array([1.0, 0.01, 1.0, 0.05, 10.0, 0.001]), np.array([10.0, 0.1, 1.0, 0.2, 50.0, 0.005])):
        g = np.clip(guess[free], lo + 1e-9, hi - 1e-9)
        r = least_squares(resid, g, bounds=(lo, hi), loss="soft_l1", f_scale=F_SCALE, x_scale=scale)
        if best is None or r.cost < best.cost:
            best = r
    x = full(best.x)
    return (EngineParams(float(x[0]), float(x[1]), float(overlap), float(x[2] + 1.0), 0.0, float(x[4]), float(x[5]),
                         float(x[3]), float(frontend)),
            float(best.cost))


def grouped_halves(bases: list[Basis], seed: int) -> tuple[list[Basis], list[Basis]]:
    """(train, test) halves by deployment (:func:`deployment_half`)."""
    train = [b for b in bases if deployment_half(b.deployment, seed) == 0]
    test = [b for b in bases if deployment_half(b.deployment, seed) == 1]
    return train, test


@dataclass
class EngineFit:
    """Fit of one engine: parameters (engine-wide and per version family), scores."""

    backend: str
    start: EngineParams                 # no host time, no jitter (before)
    holdout: EngineParams               # fitted on the training half
    final: EngineParams                 # fitted on all rows (written to the profile file)
    rows: int
    scores: dict[str, Errors] = field(default_factory=dict)  # before/after x train/test/all/dense
    families: dict[str, EngineParams] = field(default_factory=dict)          # final, per family
    holdout_families: dict[str, EngineParams] = field(default_factory=dict)  # training half, per family
    linear: dict[str, Errors] = field(default_factory=dict)   # the linear form on the same halves
    linear_holdout: EngineParams | None = None
    ranges: dict[str, list[float]] = field(default_factory=dict)   # fitted range per row feature


def _pick(by_jitter: dict[float, list[Basis]], start: EngineParams, prefill_scale: bool,
          form: str = SHIPPED_FORM, request: str = REQUEST_DEFAULT, eager: bool = True,
          families: bool = False) -> EngineParams:
    """Best terms for each jitter; the jitter with the lowest cost wins. ``families``: the cost is
    that of the model as written to the profile file, the engine-wide terms *and* the per-version
    family terms fitted at that jitter (:func:`_families`, :func:`model_cost`), not the engine-wide
    fit's alone (session 11: the two disagreed on vLLM, where the engine-wide cost picked j = 0.02
    and the shipped model's training-half cost j = 0.3)."""
    best: tuple[float, EngineParams] | None = None
    for j, bases in sorted(by_jitter.items()):
        p, cost = _fit_form(bases, start, prefill_scale, form, request, eager, frontend=True)
        p = replace(p, osl_jitter=j)
        if families:
            fams = _families(by_jitter, p, prefill_scale, request, eager)
            cost = model_cost(bases, lambda b: terms_for(b, p, fams))  # noqa: B023 (used at once)
        if best is None or cost < best[0] - 1e-12:
            best = (cost, p)
    assert best is not None
    return best[1]


def model_cost(bases: list[Basis], pick: Callable[[Basis], EngineParams]) -> float:
    """The fit's robust cost (:func:`fit_with_cost`: soft-L1 of the TTFT and TPOT log residuals at
    :data:`F_SCALE`, a TTFT left out where it is not measured) of ``bases`` under the terms
    ``pick(basis)``: comparable between models of the same rows."""
    if not bases:
        return math.inf
    pred = np.array([bases[i].predict(pick(bases[i])) for i in range(len(bases))])
    meas = np.array([[b.measured_ttft_ms, b.measured_tpot_ms] for b in bases])
    ok = np.isfinite(meas) & (meas > 0)
    r = np.where(ok, np.log(np.maximum(pred, 1e-9)) - np.log(np.where(ok, meas, 1.0)), 0.0)
    z = (r / F_SCALE) ** 2
    return float(0.5 * F_SCALE ** 2 * np.sum(2.0 * (np.sqrt(1.0 + z) - 1.0)))


def _families(by_jitter: dict[float, list[Basis]], engine: EngineParams, prefill_scale: bool,
              request: str = REQUEST_DEFAULT, eager: bool = True) -> dict[str, EngineParams]:
    """Terms per version family with at least :data:`FAMILY_MIN_DEPLOYMENTS` deployments
    (jitter fixed to the engine's)."""
    j = engine.osl_jitter
    out = {}
    for fam in sorted({b.family for b in by_jitter[j]}):
        mine = [b for b in by_jitter[j] if b.family == fam]
        if len({b.deployment for b in mine}) >= FAMILY_MIN_DEPLOYMENTS:
            own = request if FAMILY_REQUEST_TERMS else "none"   # "none": the engine's request terms, fixed
            out[fam] = replace(_fit_form(mine, engine, prefill_scale, SHIPPED_FORM, own, eager)[0], osl_jitter=j)
    return out


def terms_for(b: Basis, engine: EngineParams, families: dict[str, EngineParams]) -> EngineParams:
    return families.get(b.family, engine)


def row_ranges(bases: list[Basis]) -> dict[str, list[float]]:
    """[min, max] of concurrency, isl and osl over the fitted rows (for out-of-range warnings)."""
    if not bases:
        return {}
    return {k: [float(min(getattr(b, k) for b in bases)), float(max(getattr(b, k) for b in bases))]
            for k in ("concurrency", "isl", "osl")}


def fit_engine(backend: str, by_jitter: dict[float, list[Basis]], start: EngineParams, seed: int,
               prefill_scale: bool, request: str = REQUEST_DEFAULT, eager: bool = True) -> EngineFit:
    """Hold-out fit on deployment-grouped halves, then the final fit on all rows.
    ``by_jitter`` maps each desynchronisation value to the bases of the same rows (same order);
    ``eager``: fit the eager-step term (:func:`fit_params`)."""
    j0 = min(by_jitter)
    halves = {j: grouped_halves(b, seed) for j, b in by_jitter.items()}
    train_by_j = {j: h[0] for j, h in halves.items()}
    hold = _pick(train_by_j, start, prefill_scale, SHIPPED_FORM, request=request, eager=eager, families=True)
    hold_fam = _families(train_by_j, hold, prefill_scale, request, eager)
    final = _pick(by_jitter, start, prefill_scale, SHIPPED_FORM, request=request, eager=eager, families=True)
    fams = _families(by_jitter, final, prefill_scale, request, eager)
    lin = _pick(train_by_j, start, prefill_scale, "linear", eager=eager)
    train0, test0 = halves[j0]
    train, test = halves[hold.osl_jitter]
    every0, every = by_jitter[j0], by_jitter[final.osl_jitter]
    pick_hold = lambda b: terms_for(b, hold, hold_fam)  # noqa: E731
    pick_final = lambda b: terms_for(b, final, fams)  # noqa: E731
    sc = {"before/train": score(train0, start), "before/test": score(test0, start),
          "after/train": score(train, pick_hold), "after/test": score(test, pick_hold),
          "before/all": score(every0, start), "final/all": score(every, pick_final),
          "before/dense": score([b for b in every0 if b.dense], start),
          "final/dense": score([b for b in every if b.dense], pick_final)}
    lt, ls = halves[lin.osl_jitter]
    linear = {"after/train": score(lt, lin), "after/test": score(ls, lin)}
    return EngineFit(backend, start, hold, final, len(every), sc, fams, hold_fam, linear, lin, row_ranges(every))


def bands_from_fit(res: "FitResult") -> dict[str, Any]:
    """Served p90 bands of every engine (:mod:`calibration.serving_bands`) from two folds of
    held-out residuals: the fit's own hold-out (terms fitted on half 0, residuals on half 1)
    and the reverse (fitted here on half 1, residuals on half 0)."""
    from llmplan.calibration.serving_bands import METRICS, engine_bands, log_residuals

    seed = int(res.provenance.get("seed", 0))
    request = str(res.provenance.get("ttft_request_terms", REQUEST_DEFAULT))
    out: dict[str, Any] = {}
    for be, f in res.fits.items():
        halves = {j: grouped_halves(v, seed) for j, bs in res.bases.items()
                  if (v := [b for b in bs if b.backend == be])}
        fold_a = log_residuals(halves[f.holdout.osl_jitter][1], lambda b: terms_for(b, f.holdout, f.holdout_families))
        other = {j: h[1] for j, h in halves.items()}
        if other[min(other)]:
            p1 = _pick(other, f.start, False, request=request)
            fam1 = _families(other, p1, False, request)
            fold_b = log_residuals(halves[p1.osl_jitter][0], lambda b: terms_for(b, p1, fam1))
        else:
            fold_b = {m: np.zeros(0) for m in METRICS}
        out[be] = engine_bands(fold_a, fold_b)
    return out


# ----------------------------------------------------------------------------- provenance, files


def data_dates(sources: list[str]) -> tuple[str | None, str | None]:
    """Earliest and latest ``measured=`` date named in ``silicon_data_source`` fields."""
    dates = sorted(m for s in sources for m in re.findall(r"measured=(\d{4}-\d{2}-\d{2})", str(s)))
    return (dates[0], dates[-1]) if dates else (None, None)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _calibration_sha(calibration: str | None) -> str | None:
    """sha256 of the kernel calibration file used (None for the specification roofline)."""
    if calibration is not None and calibration.lower() in ("spec", "none", "roofline"):
        return None
    from llmplan.sim.kernel_calibration.calib_file import DEFAULT_PATH

    p = Path(calibration).expanduser() if calibration else DEFAULT_PATH
    return _sha256(p) if p.is_file() else None


def _terms(p: EngineParams) -> dict[str, float]:
    return {"host_overhead_ms": round(p.host_overhead_ms, 4),
            "host_overhead_per_seq_ms": round(p.host_overhead_per_seq_ms, 5),
            "host_overlap_per_seq_ms": round(p.host_overlap_per_seq_ms, 5),
            "prefill_scale": round(p.prefill_scale, 4), "osl_jitter": p.osl_jitter,
            "ttft_per_request_ms": round(p.ttft_per_request_ms, 3),
            "ttft_per_prompt_token_ms": round(p.ttft_per_prompt_token_ms, 6),
            "eager_step_ms_per_layer": round(p.eager_step_ms_per_layer, 5),
            "frontend_per_token_ms": round(p.frontend_per_token_ms, 5)}


def write_profiles(path: Path, fits: dict[str, EngineFit], provenance: dict[str, Any],
                   bands: dict[str, Any] | None = None) -> Path:
    """Write fitted values, hold-out scores, fitted ranges and provenance as JSON (stable order)."""
    engines = {}
    for b, f in fits.items():
        engines[b] = {**_terms(f.final), **SCHEDULER.get(b, {}), "rows": f.rows,
                      "families": {k: _terms(v) for k, v in f.families.items()},
                      "fitted_range": f.ranges,
                      "holdout": {"fitted_on_half": _terms(f.holdout),
                                  "families_on_half": {k: _terms(v) for k, v in f.holdout_families.items()},
                                  **{k: _rounded(asdict(v)) for k, v in f.scores.items()},
                                  "linear_form_on_half": _terms(f.linear_holdout) if f.linear_holdout else None,
                                  **{f"linear/{k}": _rounded(asdict(v)) for k, v in f.linear.items()}}}
    doc: dict[str, Any] = {"_provenance": provenance, "engines": engines}
    if bands:
        doc["bands"] = bands
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    from llmplan.sim import engine_terms

    engine_terms.load.cache_clear()
    return path


def _rounded(d: dict) -> dict:
    return {k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else (None if isinstance(v, float) else v))
            for k, v in d.items()}


#: numeric per-engine keys of the profile file
NUMERIC_KEYS = ("host_overhead_ms", "host_overhead_per_seq_ms", "host_overlap_per_seq_ms", "prefill_scale",
                "osl_jitter", "ttft_per_request_ms", "ttft_per_prompt_token_ms", "eager_step_ms_per_layer",
                "frontend_per_token_ms")
#: host and per-request terms all zero (``--engine-profiles none``)
NO_HOST = {"host_overhead_ms": 0.0, "host_overhead_per_seq_ms": 0.0, "host_overlap_per_seq_ms": 0.0,
           "ttft_per_request_ms": 0.0, "ttft_per_prompt_token_ms": 0.0, "eager_step_ms_per_layer": 0.0,
           "frontend_per_token_ms": 0.0}


def load_engine_overrides(spec: str | None, holdout: bool = False) -> tuple[dict[str, dict[str, Any]], str]:
    """Engine overrides from ``--engine-profiles``: ``default`` (the shipped fit,
    ``sim/data/engine_profiles.json``), ``none`` (no host time) or a JSON file. Returns
    ({backend: {field: value, "families": {family: {field: value}}, "fitted_range": ...}},
    description)."""
    if spec is None or spec == "default":
        if not SHIPPED.is_file():
            return ({b: {**NO_HOST, **SCHEDULER.get(b, {})} for b in BACKENDS},
                    "no host time (no fitted engine_profiles.json installed)")
        path = SHIPPED
    elif spec == "none":
        return {b: dict(NO_HOST) for b in BACKENDS}, "no host time (--engine-profiles none)"
    else:
        path = Path(spec).expanduser()
        if not path.is_file():
            raise UserError(f"engine profiles file not found: {path}", key="--engine-profiles",
                            fix="give a file written by `python -m llmplan.calibration.engine_fit`, 'default' or 'none'")
    try:
        doc = json.loads(path.read_text())
        out: dict[str, dict[str, Any]] = {}
        for b, v in doc["engines"].items():
            terms, fams = v, v.get("families") or {}
            if holdout:
                terms, fams = v["holdout"]["fitted_on_half"], v["holdout"].get("families_on_half") or {}
            out[b] = {**NO_HOST, **{k: float(terms[k]) for k in NUMERIC_KEYS if k in terms}}
            for k in SCHEDULER_KEYS:
                if k in v:
                    out[b][k] = bool(v[k])
            out[b]["families"] = {f: {**NO_HOST, **{k: float(t[k]) for k in NUMERIC_KEYS if k in t}}
                                  for f, t in fams.items()}
            if v.get("fitted_range"):
                out[b]["fitted_range"] = {k: [float(x) for x in r] for k, r in v["fitted_range"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(f"cannot read engine profiles {path}: {e}", key="--engine-profiles") from e
    return out, str(path)


def profile_seed(path: str | Path) -> int:
    """Seed of the deployment split a profile file was fitted with (0 when not recorded)."""
    try:
        return int(json.loads(Path(path).read_text())["_provenance"].get("seed", 0))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 0


def overrides_for(overrides: dict[str, dict[str, Any]], backend: str, version: str) -> dict[str, Any]:
    """The terms of one row: its version family's where fitted, else the engine's."""
    mine = dict(overrides.get(backend, {}))
    fam = mine.pop("families", {}).get(version_family(backend, version))
    mine.pop("fitted_range", None)
    if fam:
        mine.update(fam)
    return mine


def staleness_note(profiles: str, calibration: str | None) -> str:
    """A note when a profile file was fitted against another kernel calibration than the
    one in use ("" when they match or cannot be compared)."""
    try:
        doc = json.loads(Path(profiles).read_text())
        fitted = doc["_provenance"].get("kernel_calibration_sha256")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ""
    now = _calibration_sha(calibration)
    if fitted is None or now is None or fitted == now:
        return ""
    return ("the engine terms were fitted against another kernel calibration (sha256 "
            f"{fitted[:12]}..., now {now[:12]}...); refit with `python -m llmplan.calibration.engine_fit`")


# ----------------------------------------------------------------------------- driver


@dataclass
class FitResult:
    fits: dict[str, EngineFit]
    skipped: dict[str, int]            # reason -> rows not used
    provenance: dict[str, Any]
    bases: dict[float, list[Basis]] = field(default_factory=dict)   # jitter -> bases


def run_fit(measurements: list[str | Path], opts: SimOptions, seed: int = 0, prefill_scale: bool = False,
            backends: tuple[str, ...] = BACKENDS, workers: int = 2,
            progress: Callable[[int, int], None] | None = None,
            jitters: tuple[float, ...] = JITTER_GRID, limit: int | None = None,
            cache: Path | None = None, exclude: bool = False,
            engine_jitters: dict[str, tuple[float, ...]] | None = None, request: str = REQUEST_DEFAULT,
            eager: bool = True) -> FitResult:
    """Read measurement files and fit every engine in them (see :func:`fit_frame`)."""
    paths = serving_files(list(measurements))
    return fit_frame(read_serving_files(paths), paths, opts, seed, prefill_scale, backends, workers, progress,
                     jitters, limit, cache, exclude, engine_jitters, request, eager)


def fit_frame(df: Any, paths: list[Path], opts: SimOptions, seed: int = 0, prefill_scale: bool = False,
              backends: tuple[str, ...] = BACKENDS, workers: int = 2,
              progress: Callable[[int, int], None] | None = None,
              jitters: tuple[float, ...] = JITTER_GRID, limit: int | None = None,
              cache: Path | None = None, exclude: bool = False,
              engine_jitters: dict[str, tuple[float, ...]] | None = None, request: str = REQUEST_DEFAULT,
              eager: bool = True) -> FitResult:
    """Bases for the simulable rows of ``df`` (read from ``paths``) at each jitter of
    ``jitters`` (:func:`collect_bases`; reused from ``cache`` when it was written for the same
    inputs), then a fit per engine (:func:`fit_bases`)."""
    key = _cache_key(df, opts, backends, jitters, limit, prefill_scale, engine_jitters)
    got = _read_cache(cache, key) if cache else None
    if got is None:
        got = collect_bases(df, opts, backends, workers, progress, jitters, limit=limit, prefill=prefill_scale,
                            engine_jitters=engine_jitters)
        if cache:
            _write_cache(cache, key, *got)
    by_j, skipped = got
    return fit_bases(by_j, skipped, df, paths, opts, seed, prefill_scale, exclude, request, eager)


def _cache_key(df: Any, opts: SimOptions, backends: tuple[str, ...], jitters: tuple[float, ...],
               limit: int | None, prefill: bool, engine_jitters: dict[str, tuple[float, ...]] | None = None) -> str:
    """Everything the bases depend on: rows, options, grids, kernel calibration, scheduler policy
    and :data:`BASIS_VERSION`."""
    h = hashlib.sha256()
    h.update(df.to_csv(index=False).encode())
    h.update(repr((asdict(opts), backends, sorted(jitters), OVERLAP_GRID, limit, prefill,
                   _calibration_sha(opts.calibration), SCHEDULER, BASIS_VERSION,
                   sorted((engine_jitters or {}).items()))).encode())
    return h.hexdigest()


def _read_cache(path: Path, key: str) -> tuple[dict[float, list[Basis]], dict[str, int]] | None:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if doc.get("key") != key:
        return None
    by_j = {float(j): [Basis(**{k: tuple(v) if isinstance(v, list) else v for k, v in b.items()}) for b in bs]
            for j, bs in doc["bases"].items()}
    return by_j, dict(doc["skipped"])


def _write_cache(path: Path, key: str, by_j: dict[float, list[Basis]], skipped: dict[str, int]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    doc = {"key": key, "skipped": skipped, "bases": {str(j): [asdict(b) for b in bs] for j, bs in by_j.items()}}
    Path(path).write_text(json.dumps(doc))


def subsample(indices: list[int], limit: int | None) -> list[int]:
    """At most ``limit`` indices spread evenly over the list (deterministic)."""
    if limit is None or limit >= len(indices):
        return indices
    if limit <= 0:
        return []
    pos = np.unique(np.linspace(0, len(indices) - 1, limit).round().astype(int))
    return [indices[i] for i in pos]


def collect_bases(df: Any, opts: SimOptions, backends: tuple[str, ...] = BACKENDS, workers: int = 2,
                  progress: Callable[[int, int], None] | None = None,
                  jitters: tuple[float, ...] = JITTER_GRID, grid: tuple[float, ...] = OVERLAP_GRID,
                  limit: int | None = None, prefill: bool = False,
                  engine_jitters: dict[str, tuple[float, ...]] | None = None
                  ) -> tuple[dict[float, list[Basis]], dict[str, int]]:
    """{jitter: bases of the rows simulated at that jitter, in order} and {reason: rows not used}.
    Every row is simulated at each jitter of its engine's grid (``engine_jitters[backend]``,
    else ``jitters``); rows without a basis at one of them are left out at all.
    ``limit``: a deterministic subsample."""
    if not jitters or any(not g for g in (engine_jitters or {}).values()):
        raise UserError("no desynchronisation values to try", key="--jitter-grid")
    maps = map_rows(df, engine_profiles(SCHEDULER))
    skipped: dict[str, int] = {}
    for m in maps:
        if m.case is None:
            skipped[m.reason] = skipped.get(m.reason, 0) + 1
    idx = subsample([m.index for m in maps if m.case is not None and m.case.backend in backends], limit)
    rows = df.to_dict("records")
    engine_of = {m.index: m.case.backend for m in maps if m.case is not None}
    grid_of = {be: tuple(float(j) for j in (engine_jitters or {}).get(be, jitters)) for be in set(engine_of.values())}
    jgrid = sorted({j for i in idx for j in grid_of[engine_of[i]]})
    per_j: dict[float, dict[int, Basis | str]] = {}
    for k, j in enumerate(jgrid):
        prog = (lambda d, t, k=k: progress(k * t + d, len(jgrid) * t)) if progress else None
        idx_j = [i for i in idx if j in grid_of[engine_of[i]]]
        per_j[j] = dict(zip(idx_j, compute_bases(rows, idx_j, replace(opts, osl_jitter=j), workers, prog, grid=grid,
                                                 prefill=prefill)))
    bad: dict[int, str] = {}
    for j in jgrid:
        for i, b in per_j[j].items():
            if isinstance(b, str) and i not in bad:
                bad[i] = b.split(":", 1)[0]
    for r in bad.values():
        skipped[r] = skipped.get(r, 0) + 1
    by_j: dict[float, list[Basis]] = {j: [per_j[j][i] for i in idx if i in per_j[j] and i not in bad]  # type: ignore[misc]
                                      for j in jgrid}
    return by_j, skipped


def fit_bases(by_j: dict[float, list[Basis]], skipped: dict[str, int], df: Any, paths: list[Path],
              opts: SimOptions, seed: int = 0, prefill_scale: bool = False, exclude: bool = False,
              request: str = REQUEST_DEFAULT, eager: bool = True) -> FitResult:
    """Fit every engine present in the bases; provenance from the measurements ``df``/``paths``.
    ``exclude``: leave out the rows :func:`exclude_regimes` flags (``--exclude-regimes``, on in the
    shipped fit: module docstring)."""
    grid = sorted(by_j)
    excluded: dict[str, int] | None = None
    if exclude:
        by_j, excluded = exclude_regimes(by_j, df)
    by_j = tag_frontend_rows(by_j, df)
    fits = {}
    for be in BACKENDS:
        mine = {j: v for j, bs in by_j.items() if (v := [b for b in bs if b.backend == be])}
        if not mine:
            continue
        fits[be] = fit_engine(be, mine, EngineParams(0.5, 0.0), seed, prefill_scale, request, eager)
    first, last = data_dates(df["silicon_data_source"].tolist())
    prov = {"data_files": [{"file": f"{p.parent.name}/{p.name}", "sha256": _sha256(p) if p.is_file() else None}
                           for p in paths],
            "rows_in_files": int(len(df)),
            "rows_fitted": {b: f.rows for b, f in fits.items()}, "rows_not_used": dict(sorted(skipped.items())),
            "measured_from": first, "measured_to": last, "gpus": sorted(df["system"].astype(str).unique().tolist()),
            "kernel_calibration": opts.calibration or "default",
            "kernel_calibration_sha256": _calibration_sha(opts.calibration),
            "kernel_tiers": sorted({b.tier for bs in by_j.values() for b in bs}),
            "sim_options": {k: v for k, v in asdict(opts).items() if k != "osl_jitter"},
            "jitter_grid": grid, "jitter_grid_per_engine": engine_grids(by_j),
            "overlap_grid": next((list(bs[0].grid) for bs in by_j.values() if bs), []),
            "scheduler": SCHEDULER, "family_min_deployments": FAMILY_MIN_DEPLOYMENTS,
            "seed": seed, "split": f"halves by deployment (sha256 of seed and deployment key), seed {seed}",
            "method": ("least squares on log(mean TTFT) and log(mean TPOT), soft_l1 loss (f_scale "
                       f"{F_SCALE}), form {SHIPPED_FORM}, per desynchronisation and overlap value, lowest cost "
                       "wins (an overlap value above 0 only where a likelihood-ratio test identifies it); exact linear "
                       "decomposition of closed-loop DES runs (calibration/engine_fit.py)"),
            "prefill_scale_fitted": prefill_scale, "ttft_request_terms": request}
    if excluded is not None:
        prov["rows_excluded_by_regime"] = excluded
    return FitResult(fits, skipped, prov, by_j)


def tag_frontend_rows(by_j: dict[float, list[Basis]], df: Any) -> dict[float, list[Basis]]:
    """The bases with ``frontend`` set on the rows served behind the Dynamo front end
    (:func:`calibration.sglang_launch.dynamo_frontend_row`), whose steps the front end's
    per-token time bounds (sim/frontend_ceiling.py)."""
    from llmplan.calibration.sglang_launch import dynamo_frontend_row

    rows = df.to_dict("records")
    return {j: [replace(b, frontend=True) if dynamo_frontend_row(rows[b.index]) else b for b in bs]
            for j, bs in by_j.items()}


def engine_grids(by_j: dict[float, list[Basis]]) -> dict[str, list[float]]:
    """{engine: the jitter values its rows were simulated at}."""
    out: dict[str, set[float]] = {}
    for j, bs in by_j.items():
        for b in bs:
            out.setdefault(b.backend, set()).add(j)
    return {be: sorted(v) for be, v in sorted(out.items())}


def exclude_regimes(by_j: dict[float, list[Basis]], df: Any) -> tuple[dict[float, list[Basis]], dict[str, int]]:
    """The bases without the rows :mod:`calibration.serving_regimes` flags (regimes the replay
    does not reproduce; criteria from the row and the simulator, never from the error), and
    {flag: rows excluded}, plus the rows kept for their TPOT only (:func:`frontend_bound_queued`) under
    ``"server-queued (kept for TPOT: Dynamo front end)"``, not counted under ``"server-queued"``."""
    from llmplan.calibration.serving_regimes import SERVER_QUEUED, flags_of

    indices = sorted({b.index for bs in by_j.values() for b in bs})
    flags = flags_of(df.to_dict("records"), indices, engine_profiles(SCHEDULER))
    counts: dict[str, int] = {}
    for f in flags.values():
        for k in f:
            counts[k] = counts.get(k, 0) + 1
    tpot_only = frontend_bound_queued(flags, df)
    if tpot_only:   # kept (TPOT only): not counted as left out
        counts[SERVER_QUEUED] -= len(tpot_only)
        if not counts[SERVER_QUEUED]:
            del counts[SERVER_QUEUED]
        counts[f"{SERVER_QUEUED} (kept for TPOT: Dynamo front end)"] = len(tpot_only)
    keep = {j: [replace(b, measured_ttft_ms=math.nan) if b.index in tpot_only else b for b in bs
                if not flags.get(b.index) or b.index in tpot_only] for j, bs in by_j.items()}
    return keep, dict(sorted(counts.items()))


def frontend_bound_queued(flags: dict[int, tuple[str, ...]], df: Any) -> set[int]:
    """Rows flagged only ``server-queued`` that ran behind the Dynamo front end
    (:func:`calibration.sglang_launch.dynamo_frontend_row`): the fit keeps their TPOT and leaves
    out their TTFT. Their decode rate is the front end's ceiling, which the replay now models
    (sim/frontend_ceiling.py); the requests waiting before their first token behind the saturated
    front end are not modelled, so their TTFT stays out as before (the kept basis carries a NaN
    measured TTFT: no TTFT residual in the fit, its scores or the bands)."""
    from llmplan.calibration.serving_regimes import SERVER_QUEUED
    from llmplan.calibration.sglang_launch import dynamo_frontend_row

    rows = df.to_dict("records")
    return {i for i, f in flags.items() if tuple(f) == (SERVER_QUEUED,) and dynamo_frontend_row(rows[i])}


def _fmt(p: EngineParams) -> str:
    req = (f", r {p.ttft_per_request_ms:.1f} + {1000 * p.ttft_per_prompt_token_ms:.2f} us/tok"
           if p.ttft_per_request_ms or p.ttft_per_prompt_token_ms else "")
    fe = f", front end {p.frontend_per_token_ms:.4f}/token" if p.frontend_per_token_ms else ""
    return (f"h0 {p.host_overhead_ms:.3f}, c {p.host_overlap_per_seq_ms:.3f}, h1 {p.host_overhead_per_seq_ms:.4f}, "
            f"s {p.prefill_scale:.2f}, e {p.eager_step_ms_per_layer:.3f}/layer, j {p.osl_jitter:.2f}{req}{fe}")


def print_fit(res: FitResult, console: Any = None) -> None:
    """Rich tables: fitted values, before/after errors on the training and hold-out halves."""
    from rich.table import Table

    from llmplan.progress import make_console

    console = console or make_console()
    t = Table(title="Engine terms (h0 ms/step, c overlapped ms/seq, h1 ms/seq, s prefill scale, "
                    "e eager ms/layer, j jitter)")
    for c in ("engine", "rows", "fitted on the training half", "fitted on all rows", "version families (all rows)"):
        t.add_column(c)
    for b, f in res.fits.items():
        fam = "; ".join(f"{k}: {_fmt(v)}" for k, v in f.families.items()) or "-"
        t.add_row(b, str(f.rows), _fmt(f.holdout), _fmt(f.final), fam)
    console.print(t)
    e = Table(title="Errors of mean TTFT / TPOT (MAPE, median APE, p90 APE, %); halves by deployment")
    for c in ("engine", "set", "rows", "TTFT MAPE", "TTFT med", "TTFT p90", "TPOT MAPE", "TPOT med", "TPOT p90"):
        e.add_column(c, justify="left" if c in ("engine", "set") else "right")
    for b, f in res.fits.items():
        for k, s in list(f.scores.items()) + [(f"linear form {k}", v) for k, v in f.linear.items()]:
            e.add_row(b, k, str(s.rows), *(f"{100 * x:.1f}" for x in (s.ttft_mape, s.ttft_median, s.ttft_p90,
                                                                     s.tpot_mape, s.tpot_median, s.tpot_p90)))
    console.print(e)
    if res.skipped:
        console.print("rows not used: " + ", ".join(f"{k} {v}" for k, v in sorted(res.skipped.items())))


def add_sim_args(ap: argparse.ArgumentParser) -> None:
    """Options shared with ``llmplan validate serving``."""
    d = SimOptions()
    ap.add_argument("--calibration", default=None,
                    help="kernel calibration file, or 'spec' for the specification roofline (default: packaged fit)")
    ap.add_argument("--waves", type=int, default=d.waves, help=f"requests = max(waves x concurrency, {d.min_requests})")
    ap.add_argument("--window", choices=("all", "steady"), default=d.window,
                    help="requests averaged: all (as benchmark clients report) or steady (skip start-up burst "
                         "and drain)")
    ap.add_argument("--osl-jitter", type=float, default=None,
                    help="output lengths uniform in osl x [1-j, 1+j] for every engine (default: each engine's "
                         "fitted desynchronisation from the profile file, else 0)")
    ap.add_argument("--workers", type=int, default=2, help="simulation processes")


def add_request_arg(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--request-terms", choices=tuple(REQUEST_FORMS), default=REQUEST_DEFAULT,
                    help="per-request TTFT terms fitted with the host terms: none, a constant, or a constant and "
                         "a per prompt-token term (default %(default)s)")


def add_jitter_arg(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--jitter-grid", default=",".join(str(j) for j in JITTER_GRID),
                    help="desynchronisation values tried per engine (comma separated; default %(default)s)")


def parse_grid(text: str) -> tuple[float, ...]:
    try:
        grid = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as e:
        raise UserError(f"bad --jitter-grid '{text}': {e}", key="--jitter-grid") from e
    if not grid or any(not (0.0 <= j < 1.0) for j in grid):
        raise UserError(f"--jitter-grid values must be in [0, 1), got '{text}'", key="--jitter-grid")
    return grid


def parse_engine_jitters(specs: list[str]) -> dict[str, tuple[float, ...]] | None:
    """``["vllm=0.02", "sglang=0,0.02"]`` -> {engine: grid} (None when empty)."""
    out: dict[str, tuple[float, ...]] = {}
    for spec in specs:
        name, _, values = spec.partition("=")
        if name.strip() not in BACKENDS or not values:
            raise UserError(f"bad --engine-jitter '{spec}'", key="--engine-jitter",
                            fix=f"ENGINE=J[,J...] with ENGINE one of {', '.join(BACKENDS)}")
        out[name.strip()] = parse_grid(values)
    return out or None


def sim_options(a: argparse.Namespace) -> tuple[SimOptions, str]:
    """SimOptions from parsed arguments, with the calibration resolved (and a note)."""
    if a.waves < 1 or (a.osl_jitter is not None and not (0.0 <= a.osl_jitter < 1.0)):
        raise UserError("need --waves >= 1 and 0 <= --osl-jitter < 1", key="--waves/--osl-jitter")
    cal, note = resolve_calibration(a.calibration)
    return SimOptions(calibration=cal, waves=a.waves, window=a.window, osl_jitter=a.osl_jitter or 0.0), note


def main(argv: list[str] | None = None) -> int:
    from llmplan.errors import EXIT_USER_ERROR
    from llmplan.progress import make_console, stage_progress

    ap = argparse.ArgumentParser(prog="python -m llmplan.calibration.engine_fit", description=__doc__.split("\n")[0])
    ap.add_argument("--measurements", required=True, nargs="+",
                    help="served runs in the e2e_serving.csv layout: files, or folders holding */e2e_serving.csv")
    ap.add_argument("--out", required=True,
                    help=f"fitted profiles JSON (the shipped file the runtime reads: {SHIPPED.name} in sim/data)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the deployment-grouped hold-out split")
    ap.add_argument("--prefill-scale", action="store_true", help="also fit a per-engine prefill-time multiplier")
    add_request_arg(ap)
    ap.add_argument("--backend", action="append", choices=BACKENDS, help="engines to fit (default: all)")
    ap.add_argument("--limit", type=int, default=None, help="fit on a deterministic subsample of N rows")
    ap.add_argument("--exclude-regimes", action="store_true",
                    help="leave out of the fit the rows in a regime the replay does not reproduce "
                         "(calibration/serving_regimes.py: cache-served prompts, admission-limited, server-queued, "
                         "below decode floor; the shipped fit uses it)")
    ap.add_argument("--bases-cache", default=None,
                    help="JSON file keeping the simulated coefficients; reused when rows, options, kernel "
                         "calibration and code are unchanged (refits then take seconds)")
    add_jitter_arg(ap)
    ap.add_argument("--no-eager-term", action="store_true",
                    help="keep the eager-step term at 0 (the fit without it, same simulated coefficients)")
    ap.add_argument("--engine-jitter", action="append", default=[], metavar="ENGINE=J[,J...]",
                    help="desynchronisation values tried for one engine instead of --jitter-grid (repeatable), "
                         "e.g. vllm=0.02")
    add_sim_args(ap)
    a = ap.parse_args(argv)
    console = make_console()
    try:
        opts, note = sim_options(a)
        if note:
            console.print(f"[yellow]note:[/] {note}")
        with stage_progress(console) as upd:
            prog = (lambda d, t: upd("simulate", d, t)) if upd else None
            res = run_fit(a.measurements, opts, a.seed, a.prefill_scale, tuple(a.backend or BACKENDS), a.workers, prog,
                          parse_grid(a.jitter_grid), a.limit, Path(a.bases_cache) if a.bases_cache else None,
                          a.exclude_regimes, parse_engine_jitters(a.engine_jitter), a.request_terms,
                          eager=not a.no_eager_term)
    except UserError as e:
        console.print(e.render(), style="red", markup=False, highlight=False)
        return EXIT_USER_ERROR
    print_fit(res, console)
    out = write_profiles(Path(a.out), res.fits, res.provenance, bands_from_fit(res))
    console.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
