"""Conformance of the stored layout: chunks and codecs (set, refused, rewritten), copies between
stores and backends, and the storage protocol's array verbs.  Part of
:class:`~replaybuf_core.testing.conformance.BufferConformance`."""

from __future__ import annotations

import numpy as np
import pytest

from replaybuf_core.errors import CapabilityError, CorruptStoreError
from replaybuf_core.protocol import CAP_CHUNKS, CAP_CODECS
from replaybuf_core.store.buffer import ReplayBuffer

from .data import assert_buffer_equal, assert_snapshot_equal, make_episode, snapshot
from .harness import filled, has_capability


class ChunkCodecConformance:
    """get/set_chunks and get/set_compressors, or CapabilityError when the backend lacks them."""

    def test_chunks(self, harness):
        buf, eps = filled(harness, lengths=(5, 6, 7), strings=harness.supports_strings)
        if not has_capability(buf, CAP_CHUNKS):
            assert issubclass(CapabilityError, RuntimeError)
            with pytest.raises(CapabilityError, match="chunks"):
                buf.get_chunks()
            with pytest.raises(CapabilityError, match="chunks"):
                buf.set_chunks({"obs": (2, 3)})
            return
        chunks = buf.get_chunks()
        assert set(chunks) == set(buf.keys())
        assert all(isinstance(c, tuple) and len(c) == len(buf.store.shape("data", k)) for k, c in chunks.items())
        buf.set_chunks({"obs": (4, 3), "action": (3,)})
        assert buf.get_chunks()["obs"] == (4, 3) and buf.get_chunks()["action"] == (3,)
        assert not [n for n in buf.store.list_arrays("data") if n.startswith("_temp")]
        assert_buffer_equal(buf, eps)
        again = harness.reopen(buf)
        assert again.get_chunks()["obs"] == (4, 3)
        assert_buffer_equal(again, eps)
        assert again.keys() == buf.keys()

    @pytest.mark.parametrize("chunks, exc", [
        ({"obs": (2,)}, ValueError), ({"obs": (0, 3)}, ValueError), ({"obs": (-1, 3)}, ValueError),
        ({"obs": (2.0, 3)}, TypeError), ({"obs": (False, 3)}, TypeError),
        ({"action": (2,), "nope": (2,)}, KeyError), ({"action": (2,), "obs": (1,)}, ValueError),
    ])
    def test_bad_set_chunks(self, harness, chunks, exc):
        buf, eps = filled(harness)
        if not has_capability(buf, CAP_CHUNKS):
            pytest.skip("backend without chunks")
        old = buf.get_chunks()
        before = snapshot(buf)
        with pytest.raises(exc):
            buf.set_chunks(chunks)
        assert buf.get_chunks() == old
        assert_snapshot_equal(snapshot(buf), before)

    def test_set_chunks_failure_keeps_original(self, harness, monkeypatch):
        buf, eps = filled(harness, lengths=(5, 6))
        if not has_capability(buf, CAP_CHUNKS) or not harness.supports_write_injection:
            pytest.skip("backend without chunks")
        old = buf.get_chunks()
        before = snapshot(buf)

        def failing_write(group, name, start, values):
            raise OSError("injected failure mid-rechunk")

        monkeypatch.setattr(buf.store, "write", failing_write)
        with pytest.raises(OSError, match="injected"):
            buf.set_chunks({"obs": (2, 3)})
        monkeypatch.undo()
        assert buf.get_chunks()["obs"] == old["obs"]
        assert_snapshot_equal(snapshot(buf), before)
        buf.set_chunks({"obs": (2, 3)})  # a retry cleans the leftover temporary array up
        assert buf.get_chunks()["obs"] == (2, 3)
        assert not [n for n in buf.store.list_arrays("data") if n.startswith("_temp")]
        assert_buffer_equal(buf, eps)

    def test_compressors(self, harness):
        buf, eps = filled(harness)
        if not has_capability(buf, CAP_CODECS):
            with pytest.raises(CapabilityError):
                buf.get_compressors()
            with pytest.raises(CapabilityError):
                buf.set_compressors({"obs": "disk"})
            return
        assert set(buf.get_compressors()) == set(buf.keys())
        chunks = buf.get_chunks() if has_capability(buf, CAP_CHUNKS) else None
        buf.set_compressors({"obs": "disk"})
        disk = ReplayBuffer.resolve_compressor("disk")
        got = buf.get_compressors()["obs"]
        assert got is not None
        if hasattr(got, "cname"):
            assert str(getattr(got.cname, "value", got.cname)) == disk.cname == "zstd"
        if chunks is not None:
            assert buf.get_chunks() == chunks
        assert not [n for n in buf.store.list_arrays("data") if n.startswith("_temp")]
        assert_buffer_equal(harness.reopen(buf), eps)
        with pytest.raises(ValueError, match="unknown compressor"):
            buf.set_compressors({"obs": "fast-please"})
        with pytest.raises(KeyError):
            buf.set_compressors({"nope": "disk"})


class CopyConformance:
    """copy_from_store (into memory) and save_to_store round trips from this backend."""

    def test_copy_from_store_to_memory(self, harness):
        buf, eps = filled(harness, strings=harness.supports_strings)
        buf.update_meta({"fps": 10})
        mem = ReplayBuffer.copy_from_store(buf.root)
        assert mem.backend == "numpy"
        assert_buffer_equal(mem, eps)
        np.testing.assert_array_equal(np.asarray(mem.meta["fps"]), 10)
        # the source is untouched and still writable
        assert_buffer_equal(buf, eps)
        buf.add_episode(make_episode(1, 3, strings=harness.supports_strings))
        assert mem.n_episodes == 3

    def test_copy_from_store_keys(self, harness):
        buf, eps = filled(harness)
        mem = ReplayBuffer.copy_from_store(buf.root, keys=["obs"])
        assert mem.keys() == ["obs"]
        assert_buffer_equal(mem, [{"obs": e["obs"]} for e in eps])
        with pytest.raises(KeyError, match="nope"):
            ReplayBuffer.copy_from_store(buf.root, keys=["nope"])
        with pytest.raises(ValueError, match="if_exists"):
            ReplayBuffer.copy_from_store(buf.root, if_exists="whatever")

    def _new_store(self, harness):
        try:
            return harness.new_store()
        except NotImplementedError:
            pytest.skip("the harness has no new_store()")

    def test_save_to_store_same_backend(self, harness):
        buf, eps = filled(harness, strings=harness.supports_strings)
        buf.update_meta({"fps": 15})
        store = self._new_store(harness)
        out = buf.save_to_store(store, backend=harness.name)
        assert out is store
        again = ReplayBuffer(store, backend=harness.name)
        assert again.backend == harness.name
        assert_buffer_equal(again, eps)
        np.testing.assert_array_equal(np.asarray(again.meta["fps"][...]), 15)
        if has_capability(buf, CAP_CHUNKS) and has_capability(again, CAP_CHUNKS):
            assert again.get_chunks() == buf.get_chunks()
        with pytest.raises(FileExistsError):
            buf.save_to_store(store, backend=harness.name, if_exists="raise")
        with pytest.raises(ValueError, match="store"):
            buf.save_to_store(None)

    def test_memory_to_backend(self, harness):
        src = ReplayBuffer.create_empty_numpy()
        eps = [make_episode(n, i, strings=harness.supports_strings) for i, n in enumerate((2, 3))]
        for ep in eps:
            src.add_episode(ep)
        store = self._new_store(harness)
        got = ReplayBuffer.copy_from_store(src.root, store=store, backend=harness.name)
        assert got.backend == harness.name
        assert_buffer_equal(got, eps)
        assert_buffer_equal(ReplayBuffer(store, backend=harness.name), eps)

    def test_save_failure_leaves_source_intact(self, harness, monkeypatch):
        buf, eps = filled(harness)
        store = self._new_store(harness)
        dst_entry = __import__("replaybuf_core.registry", fromlist=["get_backend"]).get_backend(harness.name)
        real_create = dst_entry.create
        calls = []

        def create(*a, **k):
            dst = real_create(*a, **k)
            real_write = dst.write

            def failing_write(group, name, start, values):
                calls.append(name)
                if len(calls) == 2:
                    raise OSError("injected failure mid-copy")
                return real_write(group, name, start, values)

            dst.write = failing_write
            return dst

        monkeypatch.setattr(dst_entry, "create", create)
        before = snapshot(buf)
        with pytest.raises(OSError, match="injected"):
            buf.save_to_store(store, backend=harness.name)
        monkeypatch.undo()
        assert_snapshot_equal(snapshot(buf), before)
        # the half-written destination is not a valid buffer with wrong content: episode_ends is
        # committed last, so it is missing (or empty)
        try:
            partial = ReplayBuffer(store, backend=harness.name)
        except (CorruptStoreError, FileNotFoundError):
            pass
        else:
            assert partial.n_episodes == 0


class StorageProtocolConformance:
    """The StorageBackend verbs themselves (what ReplayBuffer relies on), through ``buffer.store``."""

    def test_array_verbs(self, harness):
        s = harness.make_empty().store
        assert s.has_group("data") and s.has_group("meta")
        s.create_array("data", "a", shape=(4, 2), dtype=np.dtype(np.int32), fill_value=0)
        assert s.has_array("data", "a") and s.list_arrays("data") == ["a"]
        assert s.shape("data", "a") == (4, 2) and np.dtype(s.dtype("data", "a")) == np.int32
        with pytest.raises(ValueError):
            s.create_array("data", "a", shape=(1,), dtype=np.dtype(np.int32))
        s.write("data", "a", 1, np.array([[1, 2], [3, 4]], np.int32))
        np.testing.assert_array_equal(s.read("data", "a", 0, 4), [[0, 0], [1, 2], [3, 4], [0, 0]])
        np.testing.assert_array_equal(s.read("data", "a", 0, 4, 2), [[0, 0], [3, 4]])
        got = s.read_ranges("data", "a", [0, 2], [1, 4])
        np.testing.assert_array_equal(got[0], [[0, 0]])
        np.testing.assert_array_equal(got[1], [[3, 4], [0, 0]])
        s.rename_array("data", "a", "b")
        assert not s.has_array("data", "a") and s.has_array("data", "b")
        with pytest.raises(KeyError):
            s.get_array("data", "a")
        s.resize("data", "b", 2)
        s.resize("data", "b", 5)
        np.testing.assert_array_equal(s.read("data", "b", 0, 5), [[0, 0], [1, 2], [0, 0], [0, 0], [0, 0]])
        s.delete_array("data", "b")
        assert not s.has_array("data", "b") and s.list_arrays("data") == []
        with pytest.raises(KeyError):
            s.shape("data", "b")
        s.create_array("data", "b", shape=(1,), dtype=np.dtype(np.float64))  # the name is free again
        assert s.shape("data", "b") == (1,)

    def test_optional_async_verbs(self, harness):
        """``write_async`` / ``read_rows_async``, when a backend has them, end as their synchronous
        twins do; reads overlapping a background write see it."""
        s = harness.make_empty().store
        write_async = getattr(s, "write_async", None)
        read_rows_async = getattr(s, "read_rows_async", None)
        if write_async is None and read_rows_async is None:
            pytest.skip("backend without the optional async verbs")
        n = 64
        values = np.arange(n * 6, dtype=np.float32).reshape(n, 6)
        chunks = (4, 6) if CAP_CHUNKS in s.capabilities else None
        s.create_array("data", "a", shape=(n, 6), dtype=np.dtype(np.float32), chunks=chunks, fill_value=0)
        if write_async is not None:
            futures = [write_async("data", "a", i, values[i:i + 32]) for i in range(0, n, 32)]
            np.testing.assert_array_equal(s.read("data", "a", 0, n), values)  # waits where it must
            for f in futures:
                f.result()
            with pytest.raises(IndexError):
                write_async("data", "a", n - 1, values[:2])  # rows that do not exist: before anything
        else:
            s.write("data", "a", 0, values)
        if read_rows_async is not None:
            rows = np.array([[5, 0, 63], [17, 17, 40]])
            out = np.empty(rows.shape + (6,), np.float32)
            assert read_rows_async("data", "a", rows, out).result() is out
            np.testing.assert_array_equal(out, values[rows])

    def test_attrs(self, harness):
        s = harness.make_empty().store
        s.set_attrs("meta", {"x": 1, "y": "z"})
        assert s.get_attrs("meta")["x"] == 1 and s.get_attrs("meta")["y"] == "z"

    def test_rechunk_twice(self, harness):
        buf, eps = filled(harness, lengths=(5, 6))
        if not has_capability(buf, CAP_CHUNKS):
            pytest.skip("backend without chunks")
        for ck in (2, 3, 2):
            buf.set_chunks({"obs": (ck, 3)})
            assert buf.get_chunks()["obs"] == (ck, 3)
        if has_capability(buf, CAP_CODECS):
            buf.set_compressors({"obs": "disk", "action": None})
            buf.set_compressors({"obs": "default"})
        assert buf.keys() == ["action", "obs"]
        assert_buffer_equal(buf, eps)
        assert_buffer_equal(harness.reopen(buf), eps)
