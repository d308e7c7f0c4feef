"""Read a calibration section file one (engine, family) at a time.

A section file (:mod:`llmplan.sim.kernel_calibration.calib_file`) is
``{backend: {family: {...}}}``, 0.6-3.5 MB of JSON; a plan for one engine and a dense model
uses two or three of its ~25 (engine, family) models, and parsing the whole file was most of
the time of reading it (H100: 56 ms of ``json.loads``). :func:`lazy_section` locates every
(engine, family) value in the text by its braces and parses each one only when it is asked
for, with the same ``json`` decoder on the same characters, so every number is the float a
whole-file ``json.loads`` gives.

Locating values by braces is exact only when every brace is structural. The check: the text
has no backslash (so no string holds an escaped quote and quotes pair up), no string holds a
brace, and the text between the values is exactly ``{"key":`` / ``,"key":`` / ``}`` at both
levels (every engine's and family's value is an object). Any text that fails a check is
parsed whole, as before (:func:`lazy_section` returns None).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Callable, Iterator

#: (key, start, end) of an object's values: ``text[start:end]`` is the value's JSON
Spans = list[tuple[str, int, int]]


def _positions(text: str, ch: str) -> list[int]:
    """Every position of ``ch`` in ``text`` (``str.find``: a regex scan was 10x slower)."""
    out: list[int] = []
    p = text.find(ch)
    while p >= 0:
        out.append(p)
        p = text.find(ch, p + 1)
    return out


def _matching(text: str) -> dict[int, int] | None:
    """Position of each ``{`` -> position of its ``}`` (None: unbalanced)."""
    stack: list[int] = []
    close: dict[int, int] = {}
    marks = sorted([(p, True) for p in _positions(text, "{")] + [(p, False) for p in _positions(text, "}")])
    for p, opening in marks:
        if opening:
            stack.append(p)
        elif not stack:
            return None
        else:
            close[stack.pop()] = p
    return close if not stack else None


def _members(text: str, lo: int, hi: int, close: dict[int, int]) -> Spans | None:
    """The members of the object ``text[lo:hi + 1]`` (``text[lo] == "{"``), each value an
    object; None when the text between them is anything but ``"key":`` / ``,"key":``."""
    out: Spans = []
    p = lo + 1
    sep = ""
    while p < hi:
        if not text.startswith(sep + '"', p):
            return None
        k0 = p + len(sep) + 1
        k1 = text.find('"', k0)
        if k1 < 0 or not text.startswith(":{", k1 + 1):
            return None
        v0 = k1 + 2
        v1 = close.get(v0)
        if v1 is None or v1 >= hi:
            return None
        out.append((text[k0:k1], v0, v1 + 1))
        p, sep = v1 + 1, ","
    return out if p == hi else None


def section_spans(text: str) -> dict[str, Spans] | None:
    """backend -> [(family, start, end)] of a section file's text; None where locating the
    values by their braces could be wrong (the module docstring's checks)."""
    if "\\" in text or not text.startswith("{"):
        return None
    strings = text.split('"')[1::2]
    if any("{" in s or "}" in s for s in strings):
        return None
    close = _matching(text)
    if close is None or close.get(0) != len(text.rstrip()) - 1:
        return None
    top = _members(text, 0, close[0], close)
    if top is None:
        return None
    out: dict[str, Spans] = {}
    for backend, v0, v1 in top:
        fams = _members(text, v0, v1 - 1, close)
        if fams is None:
            return None
        out[backend] = fams
    return out


class LazyObject(Mapping):
    """A JSON object whose members are parsed (and converted by ``make``) on first access;
    iteration in the file's order, as ``json.loads`` gives."""

    def __init__(self, members: dict[str, Callable[[], Any]]):
        self._make = members
        self._done: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        if key in self._done:
            return self._done[key]
        value = self._make[key]()           # KeyError for an unknown key, as a dict would
        self._done[key] = value
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._make)

    def __len__(self) -> int:
        return len(self._make)

    def __contains__(self, key: object) -> bool:
        return key in self._make

    def parsed(self) -> list[str]:
        """Keys whose values have been parsed so far."""
        return [k for k in self._make if k in self._done]


def lazy_section(text: str, make_family: Callable[[str, dict[str, Any]], Any]) -> LazyObject | None:
    """backend -> family -> ``make_family(family, parsed JSON)``, each family parsed on first
    access; None when the text must be parsed whole (see :func:`section_spans`)."""
    spans = section_spans(text)
    if spans is None:
        return None

    def family(name: str, a: int, b: int) -> Callable[[], Any]:
        return lambda: make_family(name, json.loads(text[a:b]))

    return LazyObject({backend: _backend(fams, family) for backend, fams in spans.items()})


def _backend(fams: Spans, family: Callable[[str, int, int], Callable[[], Any]]) -> Callable[[], LazyObject]:
    return lambda: LazyObject({name: family(name, a, b) for name, a, b in fams})
