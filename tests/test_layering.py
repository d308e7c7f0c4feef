"""Import layering: sim never imports optimizer or the CLI; catalogs import neither."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imports(pkg: str) -> set[str]:
    names = set()
    for f in (ROOT / pkg).glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0] if not node.module.startswith("llmplan.") else node.module)
    return names


def test_sim_never_imports_optimizer():
    imps = _imports("sim")
    assert "optimizer" not in imps
    assert not {i for i in imps if i.startswith("llmplan.") and i != "llmplan.errors"}


def test_catalogs_are_leaves():
    for pkg in ("hardware_catalog", "model_catalog"):
        imps = _imports(pkg)
        assert not {"sim", "optimizer", "calibration"} & imps
