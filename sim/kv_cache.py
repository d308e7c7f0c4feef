"""Paged KV-cache blocks of one engine, with automatic prefix caching.

Blocks hold ``block_size`` tokens. A running sequence references the blocks of its
prompt and generated tokens; most are private to it. With prefix caching, prompt
blocks whose content is known to be shared (the request's ``hash_ids``) are kept in
a cache keyed by a *chained* hash of everything before and in them, so a later request
with the same leading content reuses them instead of recomputing (vLLM automatic
prefix caching, ``vllm/v1/core/kv_cache_utils.py``).

Granularity: the cache works in *units* of ``lcm(prefix_block_tokens, block_size)``
tokens (a unit is ``unit_blocks`` engine blocks), the finest grain at which the
workload says what is shared. Cached units that no running sequence references are
*evictable*: they count as free and are evicted least-recently-used first when
blocks are needed; a freed sequence releases its units tail first, so tails go first
(as vLLM frees blocks in reverse order). Private (unshared) blocks of a finished
sequence are not retained.

Preempted requests (:meth:`KVBlockPool.park`): with prefix caching on, an engine keeps the
full blocks of a preempted request in its cache like any other freed block (vLLM v1 hashes
every full block, prompt and generated tokens alike, and a preempted request's blocks go to
the free queue with their hashes: https://docs.vllm.ai/en/v0.8.0/design/v1/prefix_caching.html;
TensorRT-LLM's block reuse likewise). They are evictable; when the request is admitted again
it reuses the leading ones not yet evicted and recomputes only the rest. A parked group is a
variable-size LRU entry, evicted tail first (partially when only some blocks are needed).

Accounting: ``used`` = blocks referenced by running sequences (private blocks plus
referenced units, each unit once); ``evictable`` = blocks in unreferenced cached
units; ``free`` = ``total - used`` (evictable blocks can be reclaimed at once).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence


def unit_keys(hash_ids: Sequence[int], id_tokens: int, unit_tokens: int, prompt_tokens: int) -> tuple[int, ...]:
    """Chained keys of the cacheable units of a prompt.

    ``hash_ids[j]`` names prompt tokens ``[j*id_tokens, (j+1)*id_tokens)``. Unit ``k`` covers
    tokens ``[k*unit_tokens, (k+1)*unit_tokens)``; it is cacheable when those tokens are all
    inside the prompt and covered by ``hash_ids``. Its key hashes the ids of every block up
    to its end, so equal keys imply equal prefixes. Python's hash of int tuples does not
    depend on PYTHONHASHSEED, so keys are stable across runs.
    """
    per_unit = unit_tokens // id_tokens
    n_units = min(len(hash_ids) * id_tokens, prompt_tokens) // unit_tokens
    if n_units <= 0:
        return ()
    keys = []
    h = 0x51ED
    for k in range(n_units):
        for j in range(k * per_unit, (k + 1) * per_unit):
            h = hash((h, hash_ids[j]))
        keys.append(h)
    return tuple(keys)


def unit_tokens_for(id_tokens: int, block_size: int) -> int:
    """Tokens per cache unit: the least common multiple of the two block sizes."""
    return id_tokens * block_size // math.gcd(id_tokens, block_size)


class KVBlockPool:
    """Block accounting for one engine (one KV cache)."""

    __slots__ = ("total", "block_size", "unit_blocks", "prefix_caching", "used", "evictable", "peak_used",
                 "_refs", "_lru", "evictions", "_parked")

    def __init__(self, total_blocks: int, block_size: int, unit_blocks: int = 1, prefix_caching: bool = True):
        self.total = total_blocks
        self.block_size = block_size
        self.unit_blocks = unit_blocks
        self.prefix_caching = prefix_caching
        self.used = 0            # referenced by running sequences
        self.evictable = 0       # in cached units with no references
        self.peak_used = 0
        self.evictions = 0       # units evicted so far
        self._refs: dict[int, int] = {}                 # unit key -> reference count
        self._lru: OrderedDict = OrderedDict()  # unreferenced units (int keys) and parked groups, LRU first
        self._parked: dict[tuple, int] = {}     # parked group key -> blocks still cached

    @property
    def free(self) -> int:
        """Blocks that can be allocated now (evictable cached blocks included)."""
        return self.total - self.used

    def allocate(self, n: int) -> None:
        """Take ``n`` blocks (caller checked ``free``), evicting LRU cached units if needed."""
        self.used += n
        if self.used > self.peak_used:
            self.peak_used = self.used
        over = self.used + self.evictable - self.total
        if over > 0:
            lru, refs, ub, parked = self._lru, self._refs, self.unit_blocks, self._parked
            while over > 0:
                key = next(iter(lru))
                n = parked.get(key) if isinstance(key, tuple) else None
                if n is None:
                    lru.popitem(last=False)
                    del refs[key]
                    self.evictable -= ub
                    self.evictions += 1
                    over -= ub
                    continue
                take = min(n, over)   # a parked group loses its tail blocks first
                if take == n:
                    lru.popitem(last=False)
                    del parked[key]
                else:
                    parked[key] = n - take
                self.evictable -= take
                over -= take

    def release(self, n: int) -> None:
        """Return ``n`` private blocks."""
        self.used -= n

    # ---- prefix cache -------------------------------------------------------------

    def match(self, keys: Sequence[int], max_units: int) -> tuple[int, int]:
        """Longest cached prefix: ``(units hit, blocks of those that are evictable now)``.

        No side effects; ``max_units`` caps the hit (an engine always computes the last
        prompt token)."""
        refs = self._refs
        hit = evict = 0
        for key in keys:
            if hit >= max_units:
                break
            r = refs.get(key)
            if r is None:
                break
            hit += 1
            if r == 0:
                evict += self.unit_blocks
        return hit, evict

    def acquire(self, keys: Sequence[int]) -> None:
        """Reference cached units (after :meth:`match`); evictable ones become used."""
        refs, lru, ub = self._refs, self._lru, self.unit_blocks
        for key in keys:
            r = refs[key]
            if r == 0:
                del lru[key]
                self.evictable -= ub
                self.used += ub
            refs[key] = r + 1
        if self.used > self.peak_used:
            self.peak_used = self.used

    def register(self, key: int) -> bool:
        """Publish a unit a sequence has just computed (its blocks stay used, now shared).

        Returns False when the key is already cached (the sequence keeps its copy private)."""
        if key in self._refs:
            return False
        self._refs[key] = 1
        return True

    def unref(self, keys: Sequence[int]) -> None:
        """Drop one reference to each unit, tail first; unreferenced units become evictable."""
        refs, lru, ub = self._refs, self._lru, self.unit_blocks
        for key in reversed(keys):
            r = refs[key] - 1
            refs[key] = r
            if r == 0:
                lru[key] = None
                self.used -= ub
                self.evictable += ub

    # ---- preempted requests' blocks -------------------------------------------------

    def park(self, key: tuple, n: int) -> None:
        """Keep ``n`` private blocks of a preempted sequence cached (evictable) under ``key``;
        without prefix caching they are simply released."""
        self.used -= n
        if n <= 0 or not self.prefix_caching:
            return
        self.evictable += n
        self._parked[key] = n
        self._lru[key] = None

    def parked(self, key: tuple) -> int:
        """Blocks of a parked group still cached (0 when evicted or never parked)."""
        return self._parked.get(key, 0)

    def unpark(self, key: tuple, n: int) -> None:
        """Take the first ``n`` blocks of a parked group back into use (the sequence was
        admitted again); the rest of the group is dropped (freed)."""
        have = self._parked.pop(key, 0)
        if not have:
            return
        del self._lru[key]
        n = min(n, have)
        self.evictable -= have
        self.used += n
        if self.used > self.peak_used:
            self.peak_used = self.used

    def cached_units(self) -> int:
        """Units currently in the prefix cache (referenced or evictable)."""
        return len(self._refs)

    def contains_prefix(self, keys: Sequence[int]) -> int:
        """Number of leading ``keys`` present in the cache (for prefix-aware routing)."""
        refs = self._refs
        n = 0
        for key in keys:
            if key not in refs:
                break
            n += 1
        return n
