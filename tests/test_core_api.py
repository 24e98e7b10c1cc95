"""Core-only API (no backend involved): chunk math, compressor presets, episode index, registry."""

from __future__ import annotations

import importlib.metadata
import signal
import subprocess
import sys
import textwrap
import types
import warnings

import numcodecs
import numpy as np
import pytest

from replaybuf_core import (
    BackendNotFoundError,
    ReplayBuffer,
    check_chunks_compatible,
    episode_of_steps,
    get_episode_idxs,
    get_optimal_chunks,
    resolve_compressor,
)
from replaybuf_core import registry
from replaybuf_core.hookspecs import hookimpl
from replaybuf_core.protocol import BackendEntrypoint


# ------------------------------------------------------------------ check_chunks_compatible
@pytest.mark.parametrize("chunks, shape", [((1,), (0,)), ((5, 3), (10, 3)), ((100, 1), (3, 7)),
                                           ((np.int64(2),), (4,)), ([2, 2], (2, 2))])
def test_check_chunks_ok(chunks, shape):
    assert check_chunks_compatible(chunks, shape) is None


@pytest.mark.parametrize("chunks, shape, exc, msg", [
    ((2,), (4, 3), ValueError, "rank"),
    ((2, 3, 1), (4, 3), ValueError, "rank"),
    ((0, 3), (4, 3), ValueError, "> 0"),
    ((-1,), (4,), ValueError, "> 0"),
    ((2.0,), (4,), TypeError, "not an integer"),
    ((True,), (4,), TypeError, "not an integer"),
    ((np.bool_(True),), (4,), TypeError, "not an integer"),
    ("2", (4,), TypeError, "tuple of ints"),
    (2, (4,), TypeError, "tuple of ints"),
    (None, (4,), TypeError, "tuple of ints"),
])
def test_check_chunks_rejects(chunks, shape, exc, msg):
    with pytest.raises(exc, match=msg):
        check_chunks_compatible(chunks, shape)


def test_a_chunk_may_hold_up_to_blosc_s_limit_in_bytes():
    """2 GiB less Blosc's 64 KiB of header (c-blosc's BLOSC_MAX_BUFFERSIZE), counted in bytes."""
    limit = 2**31 - 2**16
    check_chunks_compatible((limit // 8, 1), (10, 1), itemsize=8)
    with pytest.raises(ValueError, match=r"\(99999999999, 2\): one chunk would hold 799,999,999,992 bytes"):
        check_chunks_compatible((99999999999, 2), (420, 2), itemsize=4)
    with pytest.raises(ValueError, match="more than the 2,147,418,112"):
        check_chunks_compatible((limit // 8 + 1, 1), (10, 1), itemsize=8)


# ------------------------------------------------------------------ get_optimal_chunks
def test_optimal_chunks_rule():
    # images: 96x96x3 uint8 = 27648 B/step -> ceil(2e6/27648) = 73 steps, inner dims whole
    assert get_optimal_chunks((1000, 96, 96, 3), np.uint8) == (73, 96, 96, 3)
    # small rows: the time axis is capped at its length
    assert get_optimal_chunks((100, 2), np.float32) == (100, 2)
    # a row bigger than the target: the split dim is inside, outer dims get 1
    assert get_optimal_chunks((10, 2000, 1000), np.float64) == (1, 250, 1000)
    assert get_optimal_chunks((10, 4), np.float64, target_chunk_bytes=64) == (2, 4)
    assert get_optimal_chunks((1000, 4), np.float64, max_chunk_length=7) == (7, 4)
    assert get_optimal_chunks((0, 3), np.float32) == (1, 3)  # empty arrays still get a valid chunk


@pytest.mark.parametrize("shape, dtype", [((1,), np.uint8), ((12345, 7, 5), np.float16),
                                          ((3, 10**6), np.int64), ((50, 84, 84, 3), np.uint8)])
def test_optimal_chunks_valid_and_near_target(shape, dtype):
    ck = get_optimal_chunks(shape, dtype)
    check_chunks_compatible(ck, shape)
    assert all(1 <= c <= max(s, 1) for c, s in zip(ck, shape))
    nbytes = int(np.prod(ck)) * np.dtype(dtype).itemsize
    total = int(np.prod(shape)) * np.dtype(dtype).itemsize
    assert nbytes <= 2e6 + np.prod(ck[1:]) * np.dtype(dtype).itemsize
    assert nbytes >= min(total, 1e6) // 2


@pytest.mark.parametrize("args", [((), np.uint8), ((-1, 2), np.uint8)])
def test_optimal_chunks_rejects(args):
    with pytest.raises(ValueError):
        get_optimal_chunks(*args)
    with pytest.raises(ValueError):
        get_optimal_chunks((4,), np.uint8, target_chunk_bytes=0)
    with pytest.raises(ValueError):
        get_optimal_chunks((4,), np.uint8, max_chunk_length=0)


# ------------------------------------------------------------------ resolve_compressor
def test_resolve_compressor_presets():
    d = resolve_compressor("default")
    assert isinstance(d, numcodecs.Blosc)
    assert (d.cname, d.clevel, d.shuffle) == ("lz4", 5, numcodecs.Blosc.NOSHUFFLE)
    assert resolve_compressor() == d
    k = resolve_compressor("disk")
    assert (k.cname, k.clevel, k.shuffle) == ("zstd", 5, numcodecs.Blosc.BITSHUFFLE)
    assert ReplayBuffer.resolve_compressor("disk") == k
    codec = numcodecs.Zstd(level=3)
    assert resolve_compressor(codec) is codec
    assert resolve_compressor(None) is None


@pytest.mark.parametrize("bad, exc", [("lz4", ValueError), ("Default", ValueError), ("", ValueError),
                                      (True, TypeError), (5, TypeError), (1.5, TypeError)])
def test_resolve_compressor_rejects(bad, exc):
    with pytest.raises(exc):
        resolve_compressor(bad)


# ------------------------------------------------------------------ episode index
def test_get_episode_idxs():
    np.testing.assert_array_equal(get_episode_idxs(np.array([2, 2, 5, 6])), [0, 0, 2, 2, 2, 3])
    assert get_episode_idxs(np.zeros(0, np.int64)).shape == (0,)
    assert get_episode_idxs(np.array([3])).dtype == np.int64


def test_get_episode_idxs_large_matches_reference():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, size=2000)
    ends = np.cumsum(lengths)
    idx = get_episode_idxs(ends)
    assert idx.shape == (ends[-1],)
    ref = np.searchsorted(ends, np.arange(ends[-1]), side="right")
    np.testing.assert_array_equal(idx, ref)
    np.testing.assert_array_equal(episode_of_steps(ends, np.array([0, ends[0], ends[-1] - 1])),
                                  [0, 1, len(ends) - 1])
    with pytest.raises(IndexError, match=str(ends[-1])):
        episode_of_steps(ends, np.array([ends[-1]]))


def test_buffer_episode_idxs_cached_on_100k_steps():
    buf = ReplayBuffer.create_empty_numpy()
    for i in range(100):
        buf.add_episode({"x": np.full(1000, i, dtype=np.int32)})
    first = buf.get_episode_idxs()
    second = buf.get_episode_idxs()
    assert second is first  # cached, not recomputed
    assert not second.flags.writeable
    np.testing.assert_array_equal(second, buf.get_steps_slice(None, None)["x"])
    buf.drop_episode()
    third = buf.get_episode_idxs()
    assert third is not first and third.size == 99_000


# ------------------------------------------------------------------ registry
def test_registry_entry_points_fresh_process():
    code = textwrap.dedent("""
        import sys, warnings
        warnings.simplefilter("error")
        import numpy as np, zarr
        import replaybuf_core
        assert "zarr" not in sys.modules or True
        b = replaybuf_core.list_backends()
        assert "numpy" in b and "zarr" in b, b
        assert list(b)[:2] == ["numpy", "zarr"], list(b)
        assert b["zarr"].distribution == "replaybuf", b["zarr"]
        assert "chunks" in b["zarr"].capabilities and not b["numpy"].capabilities
        rb = replaybuf_core.ReplayBuffer({"data": {}, "meta": {"episode_ends": np.zeros(0, np.int64)}})
        assert rb.backend == "numpy"
        g = zarr.open_group(zarr.storage.MemoryStore(), mode="w")
        assert replaybuf_core.ReplayBuffer.create_from_group(g).backend == "zarr"
        print("OK")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "OK"


def test_core_import_does_not_import_zarr_or_pytest():
    code = ("import sys, replaybuf_core; "
            "print(sorted(m for m in ('zarr', 'pytest', 'hypothesis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_numpy_dict_and_zarr_group_are_guessed():
    import zarr

    rb = ReplayBuffer({"data": {"x": np.zeros((3, 2))}, "meta": {"episode_ends": np.array([3])}})
    assert rb.backend == "numpy" and rb.n_steps == 3
    g = zarr.open_group(zarr.storage.MemoryStore(), mode="w")
    ReplayBuffer.create_empty_zarr(root=g)
    assert ReplayBuffer(g).backend == "zarr"


def test_unknown_backend_lists_installed():
    with pytest.raises(BackendNotFoundError, match=r"no-such.*installed backends: .*numpy.*zarr"):
        registry.get_backend("no-such")
    with pytest.raises(BackendNotFoundError, match="numpy"):
        ReplayBuffer.create_empty("no-such")
    with pytest.raises(BackendNotFoundError, match="installed backends"):
        ReplayBuffer(object())
    with pytest.raises(TypeError):
        registry.get_backend(3)
    assert issubclass(BackendNotFoundError, ValueError)


class _GoodEntry(BackendEntrypoint):
    name = "test-good-extra"
    description = "a test backend"


@pytest.fixture
def fresh_registry():
    registry.reload_backends()
    yield registry.get_plugin_manager()
    registry.reload_backends()


def _plugin(name, func):
    mod = types.ModuleType(name)
    mod.replaybuf_backends = hookimpl(func)
    return mod


def test_plugin_whose_hook_raises_only_warns(fresh_registry):
    pm = fresh_registry

    def boom():
        raise RuntimeError("kaboom")

    pm.register(_plugin("bad_plugin", boom), name="bad_plugin")
    pm.register(_plugin("good_plugin", lambda: [_GoodEntry]), name="good_plugin")
    with pytest.warns(RuntimeWarning, match=r"bad_plugin.*kaboom"):
        names = list(registry.list_backends())
    assert {"numpy", "zarr", "test-good-extra"} <= set(names)
    assert registry.get_backend("test-good-extra").description == "a test backend"
    assert ReplayBuffer.create_empty_numpy().backend == "numpy"


def test_a_ctrl_c_while_a_plugin_loads_stops_the_command_instead_of_skipping_the_plugin(fresh_registry, monkeypatch):
    """Ctrl-C inside a plugin module's class body surfaces wrapped (``RuntimeError: Error calling
    __set_name__``, the interrupt as its cause): the CLI must stop with 130, not carry on without
    the zarr backend and say the store is not recognised (a Ctrl-C trial found it)."""
    pm = fresh_registry

    def interrupted():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("Error calling __set_name__ on 'cached_property' instance") from exc

    class _EntryPoint:
        name, value, dist = "interrupted_plugin", "interrupted_plugin:module", None

        def load(self):
            interrupted()

    pm.register(_plugin("interrupted_hook", interrupted), name="interrupted_hook")
    with pytest.raises(KeyboardInterrupt):
        list(registry.list_backends())
    registry.reload_backends()
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **kw: list(real(**kw)) + [_EntryPoint()] if kw.get("group") == "replaybuf" else real(**kw))
    with pytest.raises(KeyboardInterrupt):
        registry.get_plugin_manager()


def _load_swallowing_an_interrupt(then_raise: bool):
    """A plugin module's import that a real Ctrl-C lands in, and that swallows it: numba's C
    extension prints the interrupt and raises ``ImportError`` with no cause or context (a CI run of
    the Ctrl-C test hit this), or a module catches it and goes on."""
    caught = False
    try:
        signal.raise_signal(signal.SIGINT)  # through the installed handler, as a real Ctrl-C
    except KeyboardInterrupt:
        caught = True
    assert caught
    if then_raise:
        raise ImportError("numba._devicearray failed to import")  # outside the except: no chain
    return types.ModuleType("swallowing_plugin")


@pytest.mark.parametrize("then_raise", [True, False], ids=["unchained-import-error", "import-goes-on"])
def test_a_ctrl_c_a_plugin_import_swallows_still_stops_the_command(fresh_registry, monkeypatch, then_raise):
    class _EntryPoint:
        name, value, dist = "swallowing_plugin", "swallowing_plugin:module", None

        def load(self):
            return _load_swallowing_an_interrupt(then_raise)

    registry.reload_backends()
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **kw: list(real(**kw)) + [_EntryPoint()] if kw.get("group") == "replaybuf" else real(**kw))
    handler = signal.getsignal(signal.SIGINT)
    assert handler is signal.default_int_handler  # pytest's own; the test needs a handler that raises
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # skipped-as-broken would be a warning
        with pytest.raises(KeyboardInterrupt):
            registry.get_plugin_manager()
    assert signal.getsignal(signal.SIGINT) is handler  # the wrapper is removed again


def test_a_sigterm_interrupt_keeps_its_type_and_a_hook_swallowing_one_still_stops(fresh_registry):
    """The CLI turns SIGTERM into a KeyboardInterrupt subclass (exit 143, not 130): a swallowed one is
    raised again with its own type; also when a plugin's hook (not its import) swallows it."""
    pm = fresh_registry

    class Terminated(KeyboardInterrupt):
        pass

    def on_term(signum, frame):
        raise Terminated()

    def hook():
        try:
            signal.raise_signal(signal.SIGTERM)
        except KeyboardInterrupt:
            pass
        raise ImportError("failed to import")

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        pm.register(_plugin("terminated_hook", hook), name="terminated_hook")
        with pytest.raises(Terminated):
            list(registry.list_backends())
        assert signal.getsignal(signal.SIGTERM) is on_term
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_plugin_returning_junk_or_duplicate_warns(fresh_registry):
    pm = fresh_registry

    class Dup(BackendEntrypoint):
        name = "numpy"

    pm.register(_plugin("junk_plugin", lambda: [object, Dup]), name="junk_plugin")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        backends = registry.list_backends()
    msgs = [str(w.message) for w in rec if issubclass(w.category, RuntimeWarning)]
    assert any("not a named BackendEntrypoint" in m for m in msgs), msgs
    assert any("two replaybuf backends are named 'numpy'" in m for m in msgs), msgs
    assert backends["numpy"].plugin == "numpy"  # the first loaded (the built-in) wins


def test_guess_backend_survives_a_raising_guess(fresh_registry, caplog):
    class Raising(BackendEntrypoint):
        name = "test-raising-guess"

        def guess_can_open(self, obj):
            raise ValueError("bad guess")

    fresh_registry.register(_plugin("raising_plugin", lambda: [Raising]), name="raising_plugin")
    assert registry.guess_backend({}).name == "numpy"
    with pytest.raises(BackendNotFoundError):
        registry.guess_backend(12345)
    assert "bad guess" in caplog.text


def test_reload_backends_forgets_registered_plugins(fresh_registry):
    fresh_registry.register(_plugin("good_plugin2", lambda: [_GoodEntry]), name="good_plugin2")
    assert "test-good-extra" in registry.list_backends()
    registry.reload_backends()
    assert "test-good-extra" not in registry.list_backends()
    assert {"numpy", "zarr"} <= set(registry.list_backends())
