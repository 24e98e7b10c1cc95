"""as_uint8_if_lossless against a simple model: a value converts iff it is an integer in 0..255 whose
uint8 value, cast back, has the very same bits (so NaN, ±inf, fractions, -0.0 and out-of-range fail)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from replaybuf_core.importing import uint8_exact
from replaybuf_core.importing.uint8_exact import as_uint8_if_lossless

DTYPES = ["<f4", ">f4", "<f8", "<f2", "i1", "<i2", "<u2", "<i8", "<u8"]


def model_ok(v) -> bool:
    if isinstance(v, float):
        return (not math.isnan(v)) and v.is_integer() and 0 <= v <= 255 and math.copysign(1.0, v) > 0
    return 0 <= int(v) <= 255


def model(x: np.ndarray) -> int:
    """First offending row, or -1."""
    for i, row in enumerate(x.reshape(len(x), -1)):
        if not all(model_ok(v.item()) for v in row):
            return i
    return -1


def _arrays(dtype: str):
    elements = (st.one_of(st.integers(0, 255).map(float), st.floats(allow_nan=True, allow_infinity=True, width=min(32, 8 * np.dtype(dtype).itemsize)),
                          st.sampled_from([-0.0, 0.5, 255.5, 256.0, -1.0]))
                if np.dtype(dtype).kind == "f" else None)
    return hnp.arrays(dtype, st.tuples(st.integers(1, 6), st.integers(1, 5), st.integers(1, 3)), elements=elements)


@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=60, deadline=None)
@given(data=st.data(), block=st.sampled_from([1, 3, 7, 65536]))
def test_matches_the_model(dtype, data, block):
    x = data.draw(_arrays(dtype))
    old = uint8_exact.BLOCK
    uint8_exact.BLOCK = block  # exercise verdicts that fall on block boundaries
    try:
        u, row = as_uint8_if_lossless(x)
    finally:
        uint8_exact.BLOCK = old
    expected = model(x)
    assert row == expected
    if expected == -1:
        assert u.dtype == np.uint8 and u.shape == x.shape
        assert np.array_equal(u.astype(x.dtype).view(np.uint8), np.ascontiguousarray(x).view(np.uint8))
    else:
        assert u is None


def test_out_buffer_and_uint8_passthrough():
    x = (np.arange(2 * 3 * 4) % 256).astype("f4").reshape(2, 3, 4)
    out = np.empty(x.size, np.uint8)
    u, row = as_uint8_if_lossless(x, out=out)
    assert row == -1 and np.shares_memory(u, out) and np.array_equal(u, x.astype(np.uint8))
    same = x.astype(np.uint8)
    assert as_uint8_if_lossless(same)[0] is same


def test_non_numeric_is_refused():
    assert as_uint8_if_lossless(np.array([["a"]], dtype=object)) == (None, 0)
