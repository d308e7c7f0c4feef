"""The desynchronisation pick of the engine fit judges the model as written to the profile file: the
engine-wide terms plus the per-version family terms (calibration/engine_fit.py ``_pick``,
``model_cost``; session 11)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmplan.calibration import engine_fit as ef

GRID = ef.OVERLAP_GRID


def _row(i: int, family: str, n: int, device_ms: float, truth: ef.EngineParams, jitter_ms: float = 0.0) -> ef.Basis:
    """A hand-built basis (as in tests/test_engine_fit_frontend.py) whose base TPOT is
    ``device_ms + jitter_ms`` at every overlap value; measured = the prediction under ``truth``
    at ``jitter_ms = 0``."""
    tpot_base = tuple(max(device_ms, c * n) + jitter_ms for c in GRID)
    b = ef.Basis(index=i, backend="vllm", family=family, deployment=f"{family}{i}", model="m", dense=True,
                 gpu="h100_sxm", concurrency=n, isl=1000, osl=500, measured_ttft_ms=1.0, measured_tpot_ms=1.0,
                 ttft_base=tuple(6.0 * t for t in tpot_base), tpot_base=tpot_base,
                 ttft=(6.0, 6.0 * n, 0.0), tpot=(1.0, float(n), 0.0), tier="measured", grid=GRID)
    clean = replace(b, ttft_base=tuple(6.0 * max(device_ms, c * n) for c in GRID),
                    tpot_base=tuple(max(device_ms, c * n) for c in GRID))
    t, p = clean.predict(truth)
    return replace(b, measured_ttft_ms=t, measured_tpot_ms=p)


def test_model_cost_is_the_fits_own_cost_at_its_terms():
    truth = ef.EngineParams(1.0, 0.01)
    rows = [_row(i, "a", n, 10.0 + i, truth) for i, n in enumerate((2, 4, 8, 16, 32, 64))]
    rows = [replace(r, measured_tpot_ms=r.measured_tpot_ms * (1.1 if i % 2 else 0.95)) for i, r in enumerate(rows)]
    p, cost = ef.fit_with_cost(rows, ef.EngineParams(0.5), request="none", eager=False)
    assert ef.model_cost(rows, lambda b: p) == pytest.approx(cost, rel=1e-9)
    assert ef.model_cost([], lambda b: p) == float("inf")


def test_a_measured_ttft_left_out_adds_no_cost():
    truth = ef.EngineParams(1.0)
    row = _row(0, "a", 4, 10.0, truth)
    assert ef.model_cost([row], lambda b: truth) == pytest.approx(0.0, abs=1e-12)
    off = replace(row, measured_ttft_ms=float("nan"), measured_tpot_ms=row.measured_tpot_ms * 1.2)
    z = (0.18232155679395462 / ef.F_SCALE) ** 2   # ln 1.2
    assert ef.model_cost([off], lambda b: truth) == pytest.approx(ef.F_SCALE ** 2 * ((1 + z) ** 0.5 - 1))


def test_the_pick_with_families_judges_the_family_terms_too(monkeypatch):
    """Two version families with different host terms: the engine-wide fit alone cannot serve both,
    so its cost can favour a jitter that the family terms do not; with ``families`` the pick takes
    the jitter whose model (engine + families) fits best, here the one that reproduces the rows."""
    monkeypatch.setattr(ef, "FAMILY_MIN_DEPLOYMENTS", 3)
    fam_a, fam_b = ef.EngineParams(0.5), ef.EngineParams(4.0)
    sizes = (2, 4, 8, 16, 32, 64)
    exact = ([_row(i, "a", n, 10.0, fam_a) for i, n in enumerate(sizes)]
             + [_row(10 + i, "b", n, 12.0, fam_b) for i, n in enumerate(sizes)])
    # at the other jitter family b's rows are 1.5 ms slower, which the engine-wide h0 absorbs halfway
    # (unevenly: the family terms cannot absorb it exactly)
    shifted = exact[:6] + [replace(r, tpot_base=tuple(t + 1.5 * (1.0 + 0.4 * (-1) ** i) for t in r.tpot_base),
                                   ttft_base=tuple(t + 9.0 * (1.0 + 0.4 * (-1) ** i) for t in r.ttft_base))
                           for i, r in enumerate(exact[6:])]
    by_j = {0.0: exact, 0.3: shifted}
    start = ef.EngineParams(0.1)
    assert ef._pick(by_j, start, False, request="none", eager=False).osl_jitter == 0.3   # engine-wide cost alone
    with_fams = ef._pick(by_j, start, False, request="none", eager=False, families=True)
    assert with_fams.osl_jitter == 0.0
    fams = ef._families(by_j, with_fams, False, "none", False)
    assert set(fams) == {"a", "b"}
    assert ef.model_cost(exact, lambda b: ef.terms_for(b, with_fams, fams)) == pytest.approx(0.0, abs=1e-6)
