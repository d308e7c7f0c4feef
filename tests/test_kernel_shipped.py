"""The shipped kernel calibration: portable, attributed, no machine paths."""

from __future__ import annotations

import json
import re

from llmplan.sim.kernel_calibration.calib_file import DEFAULT_PATH

_ABS = re.compile(r'"(/(?:home|work|tmp|root|Users|mnt|opt|var)/[^"]*)"|[A-Za-z]:\\\\')


def _shipped_texts():
    folder = DEFAULT_PATH.parent
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.rglob("*")) if p.is_file()
            and p.suffix in (".json", ".md")}


def test_no_absolute_machine_path_in_shipped_calibration():
    texts = _shipped_texts()
    assert DEFAULT_PATH.name in texts
    for name, text in texts.items():
        assert not _ABS.search(text), (name, _ABS.search(text).group(0))


def test_shipped_provenance_is_relative_and_attributed():
    d = json.loads(DEFAULT_PATH.read_text(encoding="utf-8"))
    prov = d["provenance"]
    assert "Apache" in prov["attribution"]
    assert "/" not in prov.get("measurements", "")
    for entry in prov["data"]:
        assert not entry["path"].startswith("/") and entry["path"].count("/") == 1, entry["path"]
        assert len(entry["sha256"]) == 64 and entry["rows"] > 0
