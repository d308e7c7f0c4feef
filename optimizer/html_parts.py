"""HTML building blocks of ``report.html`` (optimizer/html_report.py, optimizer/html_sections.py):
escaping, number/$ formatting, tables, KPI tiles, and the SLO verdicts of plan.json values
judged by ``optimizer/slo_check.py`` (the planner's own rule).

Every helper escapes what it is given, except table cells, which callers pass already escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

from llmplan.optimizer import slo_check
from llmplan.optimizer.types import SLOTarget


def esc(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def fmt(x, digits: int = 2, unit: str = "") -> str:
    """``1,234.50 ms``; '-' for a missing or non-finite value."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        s = f"{x:,.{digits}f}"
    else:
        s = str(x)
    return esc(s + (f" {unit}" if unit else ""))


def pct(share, digits: int = 1) -> str:
    """A share in [0, 1] as ``99.9 %``; '-' when missing."""
    return fmt(100 * share, digits, "%") if _num(share) else "-"


def usd(x, digits: int = 2, per: str = "") -> str:
    """``$1,234.50/h``; '-' for a missing value."""
    if not _num(x):
        return "-"
    return esc(f"${x:,.{digits}f}{per}")


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def table(head: Sequence[str], rows: Sequence[Sequence[str]], left: Sequence[int] = (0,),
          row_class: Sequence[str] | None = None, table_id: str | None = None) -> str:
    """``head`` is escaped here; ``rows`` cells are already-escaped HTML."""
    th = "".join(f'<th class="l">{esc(h)}</th>' if i in left else f"<th>{esc(h)}</th>" for i, h in enumerate(head))
    body = []
    for r, cells in enumerate(rows):
        cls = f' class="{row_class[r]}"' if row_class and row_class[r] else ""
        body.append(f"<tr{cls}>" + "".join(f'<td class="l">{c}</td>' if i in left else f"<td>{c}</td>"
                                           for i, c in enumerate(cells)) + "</tr>")
    ident = f" id='{esc(table_id)}'" if table_id else ""
    return f"<table{ident}><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def kpis(items: Sequence[tuple[str, str]]) -> str:
    """KPI tiles; values are already-escaped HTML, labels are escaped here."""
    return ("<div class='kpis'>" + "".join(f"<div class='kpi'><b>{v}</b><span>{esc(k)}</span></div>" for k, v in items)
            + "</div>")


def deploy_label(d: Mapping) -> str:
    """``4x h100_sxm TP2/PP1 fp8 batch 128`` (a plan.json deployment)."""
    role = f"{d['role']} " if d.get("mode") == "disaggregated" and d.get("role") else ""  # a split's pool
    return (f"{role}{d.get('replicas', '?')}x {d.get('gpu', '?')} TP{d.get('tp', 1)}/PP{d.get('pp', 1)}"
            + (f"/EP{d['ep']}" if d.get("ep", 1) not in (None, 1) else "") + f" {d.get('precision', '')}"
            + (f" batch {d['max_num_seqs']}" if d.get("max_num_seqs") else ""))


def verdict(ok: bool | None) -> str:
    if ok is None:
        return "<span class='muted'>not an SLO target</span>"
    return f"<span class='{'ok' if ok else 'miss'}'>{'met' if ok else 'missed'}</span>"


def slo_target(key: str, limit_ms) -> SLOTarget | None:
    """The SLOTarget behind a plan.json target key (``ttft_p90``, ``tpot_p99.9``, ``ttft_mean``)
    and its limit; None when the key or limit is not one."""
    metric, _, at = str(key).partition("_")
    if metric not in ("ttft", "tpot") or not _num(limit_ms) or limit_ms <= 0:
        return None
    if at == "mean":
        return SLOTarget(metric, 50.0, float(limit_ms), stat="mean")
    try:
        return SLOTarget(metric, float(at.removeprefix("p")), float(limit_ms)) if at.startswith("p") else None
    except ValueError:
        return None


def judge(values_ms: Mapping[str, float | None], limits_ms: Mapping[str, float]) -> tuple[dict[str, bool | None], str | None]:
    """({key: met}, the binding key) with slo_check's rules: met = value <= limit, a NaN or
    missing prediction is a miss (``slo_check.misses``); binding = the largest value/limit
    (``slo_check.worst_miss``; ties: a percentile over a mean, then the higher percentile),
    over the targets with a finite prediction only. A key that is not an SLO target: None."""
    pairs = {k: t for k, t in ((k, slo_target(k, limits_ms.get(k))) for k in limits_ms) if t is not None}
    slos = list(pairs.values())
    value = {t.key: (float(values_ms[k]) if _num(values_ms.get(k)) else math.nan) for k, t in pairs.items()}
    missed = {t.key for t in slo_check.misses(value, slos)}
    met = {k: (None if k not in pairs else pairs[k].key not in missed) for k in limits_ms}
    top, _ = slo_check.worst_miss({k: v for k, v in value.items() if math.isfinite(v)}, slos)
    return met, next((k for k, t in pairs.items() if top is not None and t.key == top.key), None)
