"""Replay each vLLM gpt-oss-120b H100 row "at N = 512" (:mod:`calibration.inferencex_docker_client`) at every
candidate CONC of its sweep job, for comparison only: ``python -m llmplan.calibration.inferencex_docker_replay
--measurements DIR``. Choosing one CONC per row by its measured means would be a fit. Kept apart from the row
rule so that ``calibration.serving_rows`` (which imports the rule) and this replay (which imports the replay)
form no import cycle."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from llmplan.calibration.engine_fit import corrected, load_engine_overrides, overrides_for
from llmplan.calibration.inferencex_docker_client import (_int, as_recorded, burst_running, candidate_concurrencies,
                                                         client_requests, docker_capped_row)
from llmplan.calibration.serving_rows import SimOptions, engine_profiles, map_row, read_serving_files, simulate_case


def replay_candidates(row: dict, index: int, overrides: dict, opts: Any) -> list[tuple[int, float, float]]:
    """[(CONC, predicted mean TTFT ms, predicted mean TPOT ms)] of the row replayed as each
    candidate job: ``min(10 CONC, 512)`` clients, ``10 CONC`` requests, ``max_num_seqs = CONC``."""
    backend = str(row.get("backend") or "").strip().lower()
    mine = overrides_for(overrides, backend, str(row.get("backend_version") or ""))
    m = map_row(as_recorded(row), index, engine_profiles({**overrides, backend: mine}))
    if m.case is None:
        return []
    out = []
    j = float(mine.get("osl_jitter", 0.0))
    for conc in candidate_concurrencies(m.case.isl, m.case.osl, m.case.dep.par.tp):
        clients, total = client_requests(conc)
        eng = replace(m.case.dep.engine, max_num_seqs=conc)
        case = replace(m.case, concurrency=clients, dep=replace(m.case.dep, engine=eng))
        o = replace(opts, waves=1, min_requests=total, window="all", osl_jitter=j)
        p = simulate_case(case, o, wrap=corrected(float(mine.get("prefill_scale", 1.0))))
        out.append((conc, p.ttft_ms, p.tpot_ms))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measurements", nargs="+", required=True)
    ap.add_argument("--engine-profiles", default=None, help="fitted profile file (default: the shipped one)")
    ap.add_argument("--no-replay", action="store_true", help="only list the rows")
    a = ap.parse_args(argv)
    df = read_serving_files(a.measurements)
    rows = [(i, r) for i, r in enumerate(df.to_dict("records")) if docker_capped_row(r)]
    overrides, _ = load_engine_overrides(a.engine_profiles, holdout=False)
    opts = SimOptions()
    print(f"{len(rows)} row(s) of the capped Docker client (recorded N = 512)")
    print(f"{'id':70s} {'tp':>2} {'isl':>5} {'osl':>5} {'TTFT ms':>9} {'TPOT ms':>7}  CONC: predicted TTFT ms / TPOT ms")
    for i, r in rows:
        head = (f"{str(r.get('id'))[:70]:70s} {_int(r.get('tp_size')):>2} {_int(r.get('isl')):>5} {_int(r.get('osl')):>5} "
                f"{float(r['silicon_ttft_ms']):9.0f} {float(r['silicon_tpot_ms']):7.2f}")
        if a.no_replay:
            print(head)
            continue
        cells = [f"{c}: {t:.0f} / {p:.2f}" for c, t, p in replay_candidates(r, i, overrides, opts)]
        print(head + "  " + "; ".join(cells), flush=True)
    print(f"closed form: 10 x CONC prompts at once, CONC slots, read as N = 512: running = "
          f"{burst_running(4):.1f} for CONC <= 51")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
