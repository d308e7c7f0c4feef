"""The house's layers, checked on the source: every import (module level or inside a
function) points down the stack, and no two modules import each other, directly or
through others. No exemptions.

    llmplan.cli                      commands, Hydra composition, output        (top)
    llmplan.optimizer | llmplan.calibration (offline fitting and validation)
    llmplan.sim (incl. sim.kernel_calibration: the runtime kernel model)
    llmplan.hardware_catalog | llmplan.model_catalog
    llmplan.errors, llmplan.paths, llmplan.progress                             (leaves)
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: repository folder -> installed package name
PACKAGES = {"llmplan": "llmplan", "sim": "llmplan.sim", "optimizer": "llmplan.optimizer",
            "calibration": "llmplan.calibration", "hardware_catalog": "llmplan.hardware_catalog",
            "model_catalog": "llmplan.model_catalog"}

#: layer of a module (longest matching prefix); a module may import only lower layers,
#: or modules of its own package
LAYERS = {
    "llmplan": 0, "llmplan.errors": 0, "llmplan.paths": 0, "llmplan.progress": 0,
    "llmplan.hardware_catalog": 1, "llmplan.model_catalog": 1,
    "llmplan.sim": 2,
    "llmplan.optimizer": 3, "llmplan.calibration": 3,
    "llmplan.cli": 4,
}


def _modules() -> dict[str, Path]:
    mods = {}
    for folder, pkg in PACKAGES.items():
        for f in (ROOT / folder).rglob("*.py"):
            rel = f.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            mods[".".join([pkg, *parts])] = f
    return mods


MODULES = _modules()


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def _targets(name: str, path: Path) -> set[str]:
    """Project modules imported anywhere in ``path`` (module level or lazily)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            cands = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = _package_of(name, path).split(".")
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            cands = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for c in cands:
            while c and c not in MODULES:
                c = c.rsplit(".", 1)[0] if "." in c else ""
            if c and c != name:
                out.add(c)
    return out


GRAPH = {name: _targets(name, path) for name, path in MODULES.items()}


def _layer(mod: str) -> tuple[int, str]:
    best = max((k for k in LAYERS if mod == k or mod.startswith(k + ".")), key=len)
    return LAYERS[best], best


def test_every_module_has_a_layer():
    assert len(MODULES) > 60
    for mod in MODULES:
        _layer(mod)


def test_imports_point_down_the_stack():
    bad = []
    for mod, targets in GRAPH.items():
        lm, pm = _layer(mod)
        for t in targets:
            lt, pt = _layer(t)
            if t == "llmplan" or pt == pm:
                continue
            if lt >= lm:
                bad.append(f"{mod} -> {t}")
    assert not bad, "imports against the layering:\n" + "\n".join(sorted(bad))


def test_no_import_cycles():
    index, low, on_stack, stack, sccs = {}, {}, set(), [], []
    counter = [0]

    def strongconnect(v: str) -> None:  # Tarjan, iterative enough for this graph's depth
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            strongconnect(v)
    assert not sccs, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in sccs)


def test_the_simulator_never_imports_offline_tools_or_the_cli():
    for mod, targets in GRAPH.items():
        if mod.startswith("llmplan.sim"):
            assert not {t for t in targets if t.startswith(("llmplan.optimizer", "llmplan.calibration", "llmplan.cli"))}, mod


def test_leaves_import_nothing_from_the_project():
    for leaf in ("llmplan.errors", "llmplan.paths", "llmplan.progress"):
        assert GRAPH[leaf] == set(), leaf
