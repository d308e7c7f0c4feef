"""Routing requests across replicas.

* ``round_robin``: replica ``k mod R`` for the k-th request.
* ``least_outstanding``: fewest requests waiting or running; ties to the lowest index.
* ``prefix_aware``: the replica whose prefix cache holds the longest prefix of the
  request, ties to least outstanding; to keep one hot prefix from piling onto one replica
  it falls back to least outstanding when the best match has more than
  ``balance_abs_threshold`` requests above the least loaded and more than
  ``balance_rel_threshold`` times its load (the guard of SGLang's cache-aware router,
  ``sgl-router`` ``--balance-abs-threshold 32 --balance-rel-threshold 1.0001``).
  The match is read from the actual cache state at the arrival instant.
"""

from __future__ import annotations

from typing import Protocol

from llmplan.errors import UserError, suggest


class RoutedReplica(Protocol):
    """What a router may look at."""

    outstanding: int

    def prefix_match_tokens(self, seq) -> int: ...


class Router(Protocol):
    def choose(self, seq, replicas: list) -> int: ...


class RoundRobin:
    def __init__(self) -> None:
        self._k = 0

    def choose(self, seq, replicas: list) -> int:
        i = self._k % len(replicas)
        self._k += 1
        return i


class LeastOutstanding:
    def choose(self, seq, replicas: list) -> int:
        best, best_n = 0, replicas[0].outstanding
        for i in range(1, len(replicas)):
            n = replicas[i].outstanding
            if n < best_n:
                best, best_n = i, n
        return best


class PrefixAware:
    def __init__(self, balance_abs_threshold: int = 32, balance_rel_threshold: float = 1.0001) -> None:
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold
        self._lo = LeastOutstanding()

    def choose(self, seq, replicas: list) -> int:
        least = self._lo.choose(seq, replicas)
        if not seq.req.hash_ids or len(replicas) == 1:
            return least
        best, best_key = least, (0, 0)
        for i, r in enumerate(replicas):
            key = (r.prefix_match_tokens(seq), -r.outstanding)
            if key > best_key:
                best, best_key = i, key
        if best_key[0] == 0:
            return least
        lo_n, hi_n = replicas[least].outstanding, replicas[best].outstanding
        if hi_n - lo_n > self.balance_abs_threshold and hi_n > self.balance_rel_threshold * lo_n:
            return least
        return best


ROUTERS = {"round_robin": RoundRobin, "least_outstanding": LeastOutstanding, "prefix_aware": PrefixAware}


def make_router(name: str) -> Router:
    """A fresh router by name (UserError listing the known ones otherwise)."""
    if name not in ROUTERS:
        raise UserError(f"unknown router '{name}'", key="router", fix=suggest(name, ROUTERS))
    return ROUTERS[name]()
