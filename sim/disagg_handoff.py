"""Fitted per-engine hand-off delay of disaggregated serving (``DisaggSpec.handoff_ms``).

``sim/data/disagg_handoff.json`` holds, per engine, the fixed per-request delay that the
disaggregated front end adds between the prefill and the decode worker taking the request
(router -> prefill -> decode hops, connector handshake), fitted on the training half of the
disaggregated served rows by ``python -m llmplan.calibration.serving_disagg_rows --measurements
... --out sim/data/disagg_handoff.json`` (each training row replayed at several hand-offs, the closed
loop's feedback included: ``calibration/disagg_handoff_fit.py``; docs/DISAGG.md, "Validation
against served rows"). An engine without a fitted value gets the file's pooled value (the mean of
the fitted engines'); no file gives 0.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

HANDOFF_FILE = Path(__file__).resolve().parent / "data" / "disagg_handoff.json"


@lru_cache(maxsize=4)
def _load(path: str) -> dict:
    p = Path(path)
    return json.loads(p.read_text()) if p.is_file() else {}


def handoff_ms(backend: str, path: str | Path = HANDOFF_FILE) -> float:
    """The fitted hand-off delay of ``backend`` (vllm | sglang | trtllm), ms."""
    doc = _load(str(path))
    eng = doc.get("engines", {}).get(str(backend).strip().lower(), {})
    v = eng.get("handoff_ms", doc.get("pooled_handoff_ms", 0.0))
    return float(v or 0.0)


def request_terms(backend: str, path: str | Path = HANDOFF_FILE) -> str:
    """The per-request TTFT form (``DisaggSpec.request_terms``, sim/disagg_request_terms.py) the fit of
    ``backend``'s hand-off was made with: a hand-off is only valid next to the terms it was fitted with.
    ``"prompt"`` for an engine the file does not list or a file that does not record it (fits before the form
    existed)."""
    doc = _load(str(path))
    eng = doc.get("engines", {}).get(str(backend).strip().lower(), {})
    from llmplan.sim.disagg_request_terms import REQUEST_TERMS

    form = str(eng.get("request_terms", "prompt"))
    return form if form in REQUEST_TERMS else "prompt"   # "mixed" (rows of both front ends): the engine's own
