"""The epoch order of a mixture: O(1) pseudo-random permutations, exactly-once epochs, weighted draws
and the rank split.

Expected values come from the definitions (a permutation hits every index once; a group of
positions holds ``span`` whole blocks; a slot block holds each source ``c_s`` times; the ranks'
slices tile the epoch), checked by enumeration with NumPy and Python sets — never from the code's
own intermediate values.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf_core.mixture.order import EpochOrder, rank_batch_positions, rank_batches
from replaybuf_core.mixture.permutation import block_shuffle, derive_key, feistel


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 3000), key=st.integers(0, 2**64 - 1))
def test_feistel_is_a_bijection(n, key):
    out = feistel(np.arange(n), n, key)
    assert sorted(out.tolist()) == list(range(n))


def _feistel_model(x: int, n: int, key: int) -> int:
    """The construction the module docstring states, in Python ints: h-bit halves (4**h >= n), six
    rounds (L, R) -> (R, L ^ (splitmix64(R ^ k_i) & mask)) with k_i = derive_key(key, i), repeated
    while the value is >= n (cycle walking)."""
    m64 = (1 << 64) - 1

    def mix(v: int) -> int:
        v = ((v ^ (v >> 30)) * 0xBF58476D1CE4E5B9) & m64
        v = ((v ^ (v >> 27)) * 0x94D049BB133111EB) & m64
        return v ^ (v >> 31)

    h = 1
    while 4 ** h < n:
        h += 1
    mask = (1 << h) - 1
    keys = [derive_key(key, i) for i in range(6)]
    y = x
    while True:
        left, right = y >> h, y & mask
        for k in keys:
            left, right = right, left ^ (mix(right ^ k) & mask)
        y = (left << h) | right
        if y < n:
            return y


@settings(max_examples=200, deadline=None)
@given(n=st.one_of(st.integers(2, 5000), st.integers(2, 2**62)), key=st.integers(0, 2**64 - 1), data=st.data())
def test_feistel_is_the_documented_network_position_by_position(n, key, data):
    """The values themselves are pinned (a resumed run must see the order it was started with), by
    a model written from the docstring in plain integers."""
    xs = data.draw(st.lists(st.integers(0, n - 1), max_size=40))
    got = feistel(np.asarray(xs, dtype=np.int64), n, key)
    assert got.dtype == np.int64 and got.tolist() == [_feistel_model(x, n, key) for x in xs]


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 700), block=st.integers(1, 40), span=st.one_of(st.none(), st.integers(1, 9)),
       key=st.integers(0, 2**64 - 1))
def test_block_shuffle_is_a_bijection_that_keeps_blocks_together(n, block, span, key):
    out = block_shuffle(np.arange(n), n, key, block, span)
    assert sorted(out.tolist()) == list(range(n))
    n_blocks = -(-n // block)
    s = max(n_blocks, 1) if span is None else span
    for g in range(0, n, s * block):  # each group of positions holds whole blocks, at most `span` of them
        blocks = {int(i) // block for i in out[g: g + s * block]}
        held = sum(min(block, n - b * block) for b in blocks)
        assert len(blocks) <= s and held == len(out[g: g + s * block])


def test_permutations_depend_on_their_key_only():
    a = block_shuffle(np.arange(1000), 1000, derive_key(1, 0))
    assert np.array_equal(a, block_shuffle(np.arange(1000), 1000, derive_key(1, 0)))
    assert not np.array_equal(a, block_shuffle(np.arange(1000), 1000, derive_key(1, 1)))
    assert not np.array_equal(a, np.arange(1000))
    # any position alone gives the value it has among all positions
    assert np.array_equal(block_shuffle([999, 3, 500], 1000, derive_key(1, 0)), a[[999, 3, 500]])


def test_a_position_of_a_huge_epoch_costs_nothing():
    n = 2**40 + 12345
    x = np.array([0, 1, n - 1, n // 2, 10**12])
    out = block_shuffle(x, n, derive_key(7), 64, 8)
    assert out.min() >= 0 and out.max() < n and len(set(out.tolist())) == len(x)
    order = EpochOrder([2**39, 2**39 + 12345], None, 7)
    src, win = order.locate(3, x)
    assert set(src.tolist()) <= {0, 1} and np.all(win < np.where(src == 0, 2**39, 2**39 + 12345))


@pytest.mark.parametrize("block,span", [(1, None), (4, 2), (16, 1)])
def test_an_unweighted_epoch_visits_every_window_once(block, span):
    counts = [7, 0, 30, 1]
    order = EpochOrder(counts, None, seed=5, block=block, span=span)
    assert len(range(order.length)) == sum(counts)
    src, win = order.locate(2, np.arange(order.length))
    assert sorted(zip(src.tolist(), win.tolist())) == [(s, w) for s, c in enumerate(counts) for w in range(c)]
    again, _ = order.locate(2, np.arange(order.length))
    other, _ = order.locate(3, np.arange(order.length))
    assert np.array_equal(src, again) and not np.array_equal(src, other)


def test_weighted_draws_follow_the_slot_counts_and_spread_each_store_evenly():
    counts, weights = [5, 40, 3], [1.0, 1.0, 2.0]
    order = EpochOrder(counts, weights, seed=1, samples_per_epoch=3 * 4096 + 100)
    m = order.slots
    assert m == 4096 and order.slot_counts.sum() == m
    assert np.allclose(order.probabilities, np.asarray(weights) / sum(weights), atol=1 / m)
    src, win = order.locate(0, np.arange(order.length))
    for b in range(3):  # every full slot block holds each source its number of slots
        got = np.bincount(src[b * m:(b + 1) * m], minlength=3)
        assert got.tolist() == order.slot_counts.tolist()
    for b in range(1, 4):  # after whole slot blocks, a store's windows came equally often (within one)
        for s, n in enumerate(counts):
            seen = np.bincount(win[:b * m][src[:b * m] == s], minlength=n)
            assert seen.max() - seen.min() <= 1 and seen.sum() == b * order.slot_counts[s]
    big = EpochOrder([5000, 3], [1.0, 1.0], seed=2)  # a store larger than its slots a block: no repeat
    src, win = big.locate(0, np.arange(big.length))
    assert len(set(win[src == 0].tolist())) == (src == 0).sum() <= 5000


def test_a_weight_too_small_for_any_slot_is_refused_naming_the_source():
    with pytest.raises(ValueError, match="'tiny'"):
        EpochOrder([10, 10], [1.0, 1e-12], 0, names=["big", "tiny"])
    with pytest.raises(ValueError, match="'empty'"):
        EpochOrder([10, 0], [1.0, 1.0], 0, names=["big", "empty"])


@settings(max_examples=200, deadline=None)
@given(length=st.integers(0, 200), start=st.integers(0, 220), world=st.integers(1, 5), b=st.integers(1, 9),
       drop_last=st.booleans())
def test_the_ranks_batches_tile_the_rest_of_the_epoch(length, start, world, b, drop_last):
    seen = []
    per_rank = []
    for r in range(world):
        n = rank_batches(length, start, world, r, b, drop_last)
        per_rank.append(n)
        for j in range(n):
            pos = rank_batch_positions(length, start, world, r, b, j)
            assert pos.size and (pos.size == b or not drop_last)
            seen += pos.tolist()
    g = world * b
    if drop_last:
        assert len(set(per_rank)) == 1
        assert sorted(seen) == list(range(start, start + max(0, (length - start)) // g * g))
    else:
        assert sorted(seen) == list(range(start, max(start, length)))
    assert len(seen) == len(set(seen))


_FORK_WHILE_COMPILING = r"""
import os, sys, threading, time
import numpy as np
from numba.core.compiler_lock import global_compiler_lock
from replaybuf_core.mixture.permutation import feistel   # imported, not yet called: not compiled here

held = threading.Event()

def compiling():  # a thread of the parent compiling some numba function when the fork happens
    with global_compiler_lock:
        held.set()
        time.sleep(1.0)

t = threading.Thread(target=compiling)
t.start()
held.wait(10)
pid = os.fork()
if pid == 0:
    os._exit(0 if sorted(feistel(np.arange(10), 10, 3).tolist()) == list(range(10)) else 3)
deadline = time.monotonic() + 15
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        sys.exit(os.waitstatus_to_exitcode(status))
    time.sleep(0.05)
os.kill(pid, 9)
os.waitpid(pid, 0)
sys.exit(7)  # the child hung
"""


def test_a_child_forked_while_a_thread_compiles_can_still_permute():
    """The cycle walk is a numba kernel compiled on first call: a DataLoader worker forked while another
    thread of the parent compiled (held numba's compiler lock) hung at its first permutation (the old
    NumPy walk needed no compiler).  ``replaybuf_core.compiled`` holds the lock across fork (the fork
    waits for the compile to end).  Run in a fresh interpreter, so the kernel is not compiled yet."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FORK_WHILE_COMPILING], timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
