"""Tests for the optional torch adapter replaybuf_core.torch."""

from __future__ import annotations

import functools
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from replaybuf_core import ReplayBuffer  # noqa: E402
from replaybuf_core.sampling.sampler import IS_PAD_KEY, SequenceSampler  # noqa: E402
from replaybuf_core.torch import SequenceDataset, collate  # noqa: E402

LENGTHS = [7, 1, 4, 9, 3, 6]
KW = dict(pad_before=1, pad_after=3, key_first_k={"obs": 2})


def _episode(i: int, n: int) -> dict[str, np.ndarray]:
    base = i * 100 + np.arange(n)
    return {
        "obs": np.stack([base, -base], axis=1).astype(np.float32),
        "action": base.astype(np.int64),
        "lang": np.array([f"e{i}s{j}" for j in range(n)], dtype=object),
    }


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    buf = ReplayBuffer.create_empty_numpy()
    for i, n in enumerate(LENGTHS):
        buf.add_episode(_episode(i, n))
    path = tmp_path_factory.mktemp("torch_adapter") / "buf.zarr"
    buf.save_to_path(path)
    return str(path)


class _OpenCounter:
    """Picklable opener that records the process ids that opened the store."""

    def __init__(self, path: str, log: str):
        self.path, self.log = path, log

    def __call__(self):
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()}\n")
        return ReplayBuffer.create_from_path(self.path)


def _as_numpy(batch):
    return {k: (v.numpy() if isinstance(v, torch.Tensor) else np.asarray(v)) for k, v in batch.items()}


def _assert_batch_equal(got, want):
    got = _as_numpy(got)
    assert set(got) == set(want)
    for k in want:
        assert got[k].shape == want[k].shape, k
        np.testing.assert_array_equal(got[k], want[k].astype(got[k].dtype) if want[k].dtype.kind == "T" else want[k])


def test_importing_replaybuf_core_does_not_import_torch():
    code = "import sys, replaybuf_core, replaybuf_core.sampling.sampler; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_items_match_sampler_and_are_tensors(store_path):
    ds = SequenceDataset(store_path, 5, **KW)
    sampler = SequenceSampler(ReplayBuffer.create_from_path(store_path), 5, **KW)
    assert len(ds) == len(sampler) > 0
    for i in [0, 3, len(ds) - 1, -1]:
        item = ds[i]
        assert isinstance(item["obs"], torch.Tensor) and item["obs"].dtype == torch.float32
        assert item["action"].dtype == torch.int64
        assert item[IS_PAD_KEY].dtype == torch.bool and item[IS_PAD_KEY].shape == (5,)
        assert isinstance(item["lang"], np.ndarray)
        _assert_batch_equal(item, sampler[i])
    with pytest.raises(IndexError, match="out of range"):
        ds[len(ds)]


def test_pickle_carries_no_open_buffer(store_path):
    ds = SequenceDataset(store_path, 5, **KW)
    ds[0]
    assert ds._sampler is not None
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._sampler is None and clone._path == store_path
    assert len(clone) == len(ds)
    _assert_batch_equal(clone[2], _as_numpy(ds[2]))


def test_len_does_not_keep_store_open(store_path):
    ds = SequenceDataset(store_path, 5, **KW)
    n = len(ds)
    assert n > 0 and ds._sampler is None


@pytest.mark.parametrize("use_factory", [False, True])
def test_dataloader_two_workers_matches_sampler(store_path, tmp_path, use_factory):
    log = str(tmp_path / "opens.txt")
    src = _OpenCounter(store_path, log) if use_factory else store_path
    ds = SequenceDataset(src, 5, **KW)
    sampler = SequenceSampler(ReplayBuffer.create_from_path(store_path), 5, **KW)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=False, num_workers=2, collate_fn=collate)
    batches = list(loader)
    assert len(batches) == -(-len(sampler) // 4)
    for b, batch in enumerate(batches):
        want = sampler.sample_batch(np.arange(b * 4, min((b + 1) * 4, len(sampler))))
        _assert_batch_equal(batch, want)
    if use_factory:
        pids = open(log).read().split()
        assert str(os.getpid()) in pids  # len() in the main process (temporary)
        assert len(set(pids) - {str(os.getpid())}) == 2  # each worker opened its own


def test_dataloader_default_collate_numeric_keys(store_path):
    kw = dict(KW, keys=["obs", "action"])
    ds = SequenceDataset(functools.partial(ReplayBuffer.create_from_path, store_path), 3, **kw)
    sampler = SequenceSampler(ReplayBuffer.create_from_path(store_path), 3, **kw)
    loader = torch.utils.data.DataLoader(ds, batch_size=5, num_workers=2)
    got = list(loader)
    for b, batch in enumerate(got):
        want = sampler.sample_batch(np.arange(b * 5, min((b + 1) * 5, len(sampler))))
        _assert_batch_equal(batch, want)


def test_bad_source_and_collate_errors():
    with pytest.raises(TypeError, match="path_or_factory"):
        SequenceDataset(42, 3)
    with pytest.raises(ValueError, match="at least one sample"):
        collate([])


def test_dataloader_reads_batches_through_sample_batch(store_path, monkeypatch):
    ds = SequenceDataset(store_path, 4, **KW)

    def no_single_reads(self, idx):
        raise AssertionError("DataLoader should use __getitems__ -> sample_batch")

    monkeypatch.setattr(SequenceSampler, "__getitem__", no_single_reads)
    loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=0, collate_fn=collate)
    n = sum(batch[IS_PAD_KEY].shape[0] for batch in loader)
    assert n == len(ds)
