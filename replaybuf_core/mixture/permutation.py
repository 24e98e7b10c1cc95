"""Pseudo-random permutations of ``[0, n)`` computable at any position in O(1): a Feistel network with
cycle walking, and a block shuffle built on it that keeps neighbours together for streaming reads.

Nothing here materialises a permutation: position ``p`` maps to ``permute(p)`` with a few integer
operations (a compiled loop: a batch of 32 positions in microseconds, where numpy's per-call cost
made the cycle walk of small arrays milliseconds), so an epoch of 10^9 samples costs no memory and a
resume at any position costs nothing.

**Feistel bijection** (Luby & Rackoff, "How to construct pseudorandom permutations from pseudorandom
functions", SIAM J. Comput. 1988; the cycle-walking trick of Black & Rogaway, "Ciphers with
arbitrary finite domains", CT-RSA 2002).  ``x`` in ``[0, 4**h)`` (the smallest power of 4 not below
``n``) is split into two ``h``-bit halves ``(L, R)``; each of :data:`ROUNDS` rounds maps ``(L, R)``
to ``(R, L xor F_i(R))`` with ``F_i`` a keyed 64-bit mixer (splitmix64's finaliser; Steele, Lea &
Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014).  Every round is invertible,
so the network is a bijection of ``[0, 4**h)``; applying it again until the value falls below
``n`` (cycle walking) gives a bijection of ``[0, n)`` — fewer than 4 applications on average, since
``4**h < 4 n``.

**Block shuffle** (:func:`block_shuffle`): the index space is cut into blocks of ``block`` consecutive
indices (the last one shorter), the blocks are permuted, and the indices of each group of ``span``
consecutive permuted blocks are permuted together.  ``block=1`` is a plain random permutation;
``block=K, span=S`` visits ``S`` blocks at a time, each read once per epoch (MosaicML streaming's
block-wise shuffles, ``py1b``/``py1br``, keep the same locality).

Keys come from :func:`derive_key` (a splitmix64 chain over integers), so a permutation depends only on
the integers it is keyed by (seed, epoch, a stream number): the same on every machine and process.
"""

from __future__ import annotations

import functools

import numpy as np

from replaybuf_core.compiled import numba

__all__ = ["ROUNDS", "derive_key", "feistel", "block_shuffle"]

#: Feistel rounds (4 already make a strong pseudo-random permutation from pseudo-random functions)
ROUNDS = 6
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix_int(x: int) -> int:
    """splitmix64's finaliser on a Python int (mod 2**64)."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def derive_key(*parts: int) -> int:
    """A 64-bit key from integers (any sign or size), order-sensitive: a splitmix64 chain."""
    key = 0x5EED
    for p in parts:
        p = int(p)
        key = _mix_int(key + _GOLDEN + (p & _MASK64) + ((p >> 64) & _MASK64) * 3 + (p < 0))
    return key


def _half_bits(n: int) -> int:
    """The smallest ``h`` with ``4**h >= n`` (at least 1)."""
    h = 1
    while (1 << (2 * h)) < n:
        h += 1
    return h


@functools.lru_cache(maxsize=4096)
def _round_keys(key: int) -> np.ndarray:
    """The network's round keys for ``key`` (uint64 (ROUNDS,), read-only: shared by the cache)."""
    keys = np.array([derive_key(key, i) for i in range(ROUNDS)], dtype=np.uint64)
    keys.flags.writeable = False
    return keys


@numba.njit(nogil=True, cache=True)
def _walk(x: np.ndarray, n: np.uint64, h: np.uint64, round_keys: np.ndarray, out: np.ndarray) -> None:
    """``out[i]`` = the network applied to ``x[i]`` until the value falls below ``n`` (cycle walking);
    every value is uint64 (numba would turn uint64 mixed with int64 into float64)."""
    mask = (np.uint64(1) << h) - np.uint64(1)
    for i in range(x.size):
        y = x[i]
        while True:
            left, right = y >> h, y & mask
            for k in round_keys:
                m = right ^ k  # splitmix64's finaliser, wrapping mod 2**64
                m = (m ^ (m >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
                m = (m ^ (m >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
                m = m ^ (m >> np.uint64(31))
                left, right = right, left ^ (m & mask)
            y = (left << h) | right
            if y < n:
                break
        out[i] = y


def feistel(x, n: int, key: int) -> np.ndarray:
    """The keyed pseudo-random bijection of ``[0, n)`` at positions ``x``.

    Args:
        x: integer array-like of positions, each in ``[0, n)``.
        n: domain size, >= 0 (``n <= 2**62``).
        key: 64-bit key (see :func:`derive_key`).

    Returns:
        int64 array shaped like ``x``: distinct positions map to distinct values in ``[0, n)``.

    Raises:
        ValueError: a position outside ``[0, n)`` or ``n`` beyond ``2**62``.
    """
    x = np.asarray(x, dtype=np.int64)
    n = int(n)
    if not 0 <= n <= 2**62:
        raise ValueError(f"permutation size must be in [0, 2**62], got {n}")
    if x.size and (int(x.min()) < 0 or int(x.max()) >= n):
        raise ValueError(f"positions must be in [0, {n}), got {int(x.min())}..{int(x.max())}")
    if n <= 1 or not x.size:
        return x.copy()
    round_keys = _round_keys(int(key))
    y = np.empty(x.size, dtype=np.uint64)
    # cycle walking: the cycle through x holds a value below n, so each walk ends
    _walk(np.ascontiguousarray(x, dtype=np.uint64).reshape(-1), np.uint64(n), np.uint64(_half_bits(n)), round_keys, y)
    return y.view(np.int64).reshape(x.shape)


def block_shuffle(x, n: int, key: int, block: int = 1, span: int | None = None) -> np.ndarray:
    """Position ``x`` -> index of a permutation of ``[0, n)`` that keeps blocks of indices together.

    ``[0, n)`` is cut into blocks of ``block`` consecutive indices (the last one holds ``n % block``
    when that is not 0).  The full blocks are permuted (the short one stays last); consecutive
    groups of ``span`` permuted blocks occupy consecutive runs of positions, and inside each group
    the positions are permuted over all of its indices.  So positions ``[g * span * block, (g + 1)
    * span * block)`` hold exactly the indices of ``span`` blocks, in random order.

    Args:
        x: integer array-like of positions in ``[0, n)``.
        n: number of indices.
        key: 64-bit key.
        block: indices per block, >= 1.
        span: blocks permuted together, >= 1; None: all of them (one permutation of everything).

    Returns:
        int64 array shaped like ``x``; a bijection of ``[0, n)`` over all positions.

    Raises:
        ValueError: a position outside ``[0, n)``, ``block`` or ``span`` below 1.
    """
    x = np.asarray(x, dtype=np.int64)
    n, block = int(n), int(block)
    if block < 1 or (span is not None and int(span) < 1):
        raise ValueError(f"block and span must be >= 1, got block={block}, span={span}")
    if x.size and (int(x.min()) < 0 or int(x.max()) >= n):
        raise ValueError(f"positions must be in [0, {n}), got {int(x.min())}..{int(x.max())}")
    n_full = n // block
    n_blocks = n_full + (n % block > 0)
    span = n_blocks if span is None else min(int(span), max(n_blocks, 1))
    flat = x.reshape(-1)
    out = np.empty_like(flat)
    group_len = span * block
    groups = flat // group_len
    for g in np.unique(groups):
        sel = groups == g
        g = int(g)
        first_block = g * span
        size = min(n, (first_block + span) * block) - first_block * block  # the last group may be short
        inner = feistel(flat[sel] - g * group_len, size, derive_key(key, 1, g))
        slot = first_block + inner // block
        full = slot < n_full
        blk = np.where(full, 0, slot)
        if full.any():
            blk[full] = feistel(slot[full], n_full, derive_key(key, 2))
        out[sel] = blk * block + inner % block
    return out.reshape(x.shape)
