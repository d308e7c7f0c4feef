"""A line plot in plain text for the terminal: title, y axis with its unit, x axis with its
unit and tick values, one marker per point. Missing points (None / NaN) are left out and named."""

from __future__ import annotations

import math
from collections.abc import Sequence


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def text_plot(xs: Sequence[float], ys: Sequence[float | None], title: str, x_label: str, y_label: str,
              width: int = 60, height: int = 10, log_x: bool = False) -> str:
    """``height`` rows x ``width`` columns of plot area, '*' at each point, '.' joining
    neighbours. ``log_x``: x positions on a log scale (for scale factors like 0.5, 1, 2, 4)."""
    pts = [(float(x), float(y)) for x, y in zip(xs, ys) if y is not None and math.isfinite(float(y))]
    missing = [x for x, y in zip(xs, ys) if y is None or not math.isfinite(float(y))]
    lines = [title, f"  y: {y_label}"]
    if not pts:
        return "\n".join(lines + ["  (no finite point)"])

    def xpos(x: float) -> float:
        return math.log(x) if log_x and x > 0 else x

    x0, x1 = min(xpos(x) for x, _ in pts), max(xpos(x) for x, _ in pts)
    y0, y1 = min(y for _, y in pts), max(y for _, y in pts)
    if y1 == y0:
        y0, y1 = y0 - (abs(y0) * 0.1 or 1.0), y1 + (abs(y1) * 0.1 or 1.0)
    grid = [[" "] * width for _ in range(height)]

    def cell(x: float, y: float) -> tuple[int, int]:
        c = 0 if x1 == x0 else round((xpos(x) - x0) / (x1 - x0) * (width - 1))
        r = round((y1 - y) / (y1 - y0) * (height - 1))
        return r, c

    cells = [cell(x, y) for x, y in sorted(pts)]
    for (r0, c0), (r1, c1) in zip(cells, cells[1:]):
        for k in range(1, max(1, c1 - c0)):
            r = round(r0 + (r1 - r0) * k / (c1 - c0))
            if grid[r][c0 + k] == " ":
                grid[r][c0 + k] = "."
    for r, c in cells:
        grid[r][c] = "*"
    lab = max(len(_fmt(y0)), len(_fmt(y1)))
    for i, row in enumerate(grid):
        tick = _fmt(y1) if i == 0 else _fmt(y0) if i == height - 1 else ""
        lines.append(f"  {tick:>{lab}} |" + "".join(row))
    lines.append("  " + " " * lab + " +" + "-" * width)
    axis = [" "] * width
    for x, _ in sorted(pts):
        t = _fmt(x)
        c = cell(x, y0)[1]
        start = min(max(0, c - len(t) // 2), width - len(t))
        if all(ch == " " for ch in axis[max(0, start - 1):start + len(t) + 1]):
            axis[start:start + len(t)] = t
    lines.append("  " + " " * lab + "  " + "".join(axis).rstrip())
    lines.append("  " + " " * lab + f"  x: {x_label}" + (" (log scale)" if log_x else ""))
    if missing:
        lines.append("  no value at x = " + ", ".join(_fmt(x) for x in missing))
    return "\n".join(lines)
