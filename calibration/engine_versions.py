"""Engine release numbers of served rows and collection files: one parser for every rule that
depends on an engine version (``vllm_launch``, ``sglang_launch``, ``engine_fit.version_family``).

A release is the leading ``major.minor[.patch]`` of the text (an optional ``v`` before it; a suffix
such as ``rc3``, ``.post2`` or a fourth number is ignored; a missing patch is 0). Anything else
(``gpt-oss-dev``, ``glm5-hopper``, an empty cell) is no release: :func:`release` returns None and
:func:`at_least` is False, so a version rule never applies to a build it cannot date.
"""

from __future__ import annotations

import re

_RELEASE = re.compile(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


def release(version: object) -> tuple[int, int, int] | None:
    """(major, minor, patch) of ``version`` (``"0.5.6.post2"`` -> (0, 5, 6), ``"1.0.0rc3"`` ->
    (1, 0, 0), ``"0.18"`` -> (0, 18, 0)); None for text that does not start with a release number."""
    m = _RELEASE.match(str(version or ""))
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def at_least(version: object, first: tuple[int, ...]) -> bool:
    """True when ``version`` is a release at or after ``first`` (``(0, 18)`` means 0.18.0)."""
    v = release(version)
    return v is not None and v >= tuple(first) + (0,) * (3 - len(first))
