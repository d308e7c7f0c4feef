"""What a disaggregated served row's labels identify, and what they cannot.

A ``mode = disagg`` row of ``e2e_serving.csv`` names its deployment by its labels: engine,
version, model, GPU, precision, lengths and, per pool (``prefill_*`` / ``decode_*``), the
parallelism columns and worker count. This module reads those labels:

* :func:`disagg_deployment_key`: the deployment the labels name (batch sizes and concurrency
  excluded: they vary per run of one deployment);
* :func:`split_keys`: the keys of the held-out split, which keep two runs of one decode
  deployment whose prefill pools are spelled TP and attention DP in one half;
* :func:`label_conflicts`: labels that name more than one measurement at the same client
  concurrency. Two different mean TTFT/TPOT pairs for one deployment at one point mean the runs
  behind those labels differed in something the columns do not record, so no row carrying those
  labels says which deployment it ran: its layout is a missing input, not something to guess.
  Evidence in the shared files (docs/DISAGG.md, "Rows whose labels do not identify the run"):
  the ``2026_03_25_*`` / ``2026_04_06_*`` exports write ``tp_size`` = the worker's GPUs and
  ``attention_dp_size`` = 1 for runs that the ``db-dump`` rows (ids ``..._cfg<N>``, same
  measured values) record with attention DP (every one of them: e.g. ``cfg434``, SGLang H200,
  decode ``attention_dp_size`` 8 and ``moe_ep_size`` 8, exported as ``decode_tp_size`` 8,
  ``decode_moe_ep_size`` 1);
* :func:`repeat_of`: rows whose measurement equals that of a replayable row carrying the inputs
  they lack (the dumps re-export the ``cfg`` runs without worker counts or batch sizes): one
  measurement, counted once, under the row that says what ran.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from llmplan.calibration.serving_rows import _CONC, _int, _text, deployment_key, measured_means

#: per-pool columns of a disaggregated row (``prefill_<name>`` / ``decode_<name>``)
POOL_COLUMNS = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size", "batch_size")
POOLS = ("prefill", "decode")
#: labels that, with the lengths, the concurrency and the measured means, identify one measurement
#: (the model label is not one: the db dump labels DeepSeek-R1 runs DeepSeek-V3, as for aggregated rows)
REPEAT_LABELS = ("backend", "backend_version", "system", "precision", "isl", "osl")


def is_disagg(row: Mapping[str, Any]) -> bool:
    return _text(row.get("mode")) == "disagg"


def concurrency_of_source(row: Mapping[str, Any]) -> int:
    """``silicon_concurrency=N`` of ``silicon_data_source`` (0 when absent)."""
    m = _CONC.search(str(row.get("silicon_data_source") or ""))
    return int(m.group(1)) if m else 0


def disagg_deployment_key(row: Mapping[str, Any]) -> str:
    """The deployment a disaggregated row measures: the aggregated key plus both pools'
    parallelism and worker counts (batch sizes and concurrency excluded: they vary per run)."""
    extra = [f"{p}_{c}={_int(row.get(f'{p}_{c}'), 0)}" for p in POOLS
             for c in ("num_workers", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")]
    return deployment_key(row) + "|" + "|".join(extra)


#: the pool whose tensor-parallel / attention-DP spelling differs between two runs of one decode
#: deployment (:func:`split_keys`)
SPLIT_MERGED_POOL = "prefill"


def tp_spelled_key(row: Mapping[str, Any]) -> str:
    """:func:`disagg_deployment_key` with the prefill workers' layout written as TP over all their
    attention GPUs (``tp_size`` = TP x attention DP, ``attention_dp_size`` = 1)."""
    r = dict(row)
    p = SPLIT_MERGED_POOL
    tp = _int(r.get(f"{p}_tp_size"), 0)
    if tp >= 1:
        r[f"{p}_tp_size"] = tp * max(1, _int(r.get(f"{p}_attention_dp_size"), 1))
        r[f"{p}_attention_dp_size"] = 1
    return disagg_deployment_key(r)


def split_keys(rows: list[Mapping[str, Any]]) -> dict[int, str]:
    """{row position: the key that puts the disaggregated row in a half of the held-out split}: its
    :func:`disagg_deployment_key`, except a row whose prefill pool is spelled attention DP while
    another row of the frame carries the same labels with that pool spelled TP (:func:`tp_spelled_key`):
    it takes that row's key, so the two fall in one half. Rows without such a twin keep their key
    (the split of every other row does not move).

    Why: the H200 TensorRT-LLM db-dump measures disaggregated configurations in two workflow runs
    (2026-02-14, run 288, and 2026-03-23, run 333) whose rows differ only in the prefill pool's
    spelling, TP 8 in one and attention DP 8 in the other (``cfg303``/``cfg590``, ``cfg291``/``cfg675``,
    ``cfg294``/``cfg679``, ``cfg325``/``cfg674``, ``cfg334``/``cfg673``): same engine build, decode
    pool, worker counts and prefill EP; at the 9 concurrencies both measured, TPOT equal within 0.5%
    and TTFT within 0.5-23%. Whether the prefill layout differed or the export swaps its columns (as
    the ``2026_03_25_*`` exports do, module docstring) is not recorded; either way they are one decode
    deployment measured twice, and a held-out row must not have its twin run in the training half.
    The replay still uses each row's own labels."""
    own = {i: disagg_deployment_key(r) for i, r in enumerate(rows) if is_disagg(r)}
    keys = set(own.values())
    out = {}
    for i, k in own.items():
        t = tp_spelled_key(rows[i])
        out[i] = t if t != k and t in keys else k
    return out


def label_conflicts(rows: list[Mapping[str, Any]]) -> dict[int, str]:
    """{row position: why its labels do not identify its run} for every disaggregated row whose
    deployment key names two or more different measurements at one concurrency (rows without a
    known concurrency are not compared: their point is unknown). Every row of such a key is listed,
    also at concurrencies measured once: the file does not say which of the runs it belongs to."""
    points: dict[tuple[str, int], set[tuple[float, float]]] = {}
    for r in rows:
        m = measured_means(r)
        if is_disagg(r) and m is not None and concurrency_of_source(r) > 0:
            points.setdefault((disagg_deployment_key(r), concurrency_of_source(r)), set()).add(m)
    split: dict[str, list[tuple[int, list[tuple[float, float]]]]] = {}
    for (key, conc), seen in sorted(points.items()):
        if len(seen) > 1:
            split.setdefault(key, []).append((conc, sorted(seen)))
    out: dict[int, str] = {}
    for i, r in enumerate(rows):
        if not is_disagg(r) or disagg_deployment_key(r) not in split:
            continue
        where = split[disagg_deployment_key(r)]
        conc, vals = where[0]
        out[i] = (f"the layout: these labels name {len(vals)} different measurements at concurrency {conc} "
                  f"(TTFT {' vs '.join(f'{a:.0f}' for a, _ in vals)} ms, TPOT {' vs '.join(f'{b:.1f}' for _, b in vals)}"
                  f" ms; {len(where)} such concurrencies), so the runs differed in something the columns do not "
                  "record (this export writes attention DP as tp_size, docs/DISAGG.md)")
    return out


def repeat_key(row: Mapping[str, Any]) -> tuple | None:
    """One measurement's identity, pool labels and model label excluded (None without measured means)."""
    m = measured_means(row)
    if m is None:
        return None
    return (*(_text(row.get(c)) if c not in ("isl", "osl") else _int(row.get(c), 0) for c in REPEAT_LABELS),
            concurrency_of_source(row), *m)


def repeat_of(rows: list[Mapping[str, Any]], replayable: Iterable[int]) -> dict[int, int]:
    """{row position: position of the replayable row with the same measurement} for the disaggregated
    rows not in ``replayable`` (the first replayable row wins; two distinct runs never agree to 1e-4 ms
    in both means)."""
    first: dict[tuple, int] = {}
    for i in sorted(replayable):
        k = repeat_key(rows[i])
        if k is not None:
            first.setdefault(k, i)
    done = set(replayable)
    out: dict[int, int] = {}
    for i, r in enumerate(rows):
        if i in done or not is_disagg(r):
            continue
        k = repeat_key(r)
        if k is not None and k in first:
            out[i] = first[k]
    return out
