"""torch's defaults — ``DataLoader(ds, batch_size=64, shuffle=True)``, i.e. ``default_collate`` — on
our datasets: the batch ``__getitems__`` read comes back whole (no restack), equal to the sampler's
batch, in the main process and through workers; rows of a batch behave as plain tensors."""

from __future__ import annotations

import functools
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, default_collate  # noqa: E402

from replaybuf_core import ReplayBuffer  # noqa: E402
from replaybuf_core.sampling.window_sampler import WindowSampler  # noqa: E402
from replaybuf_core.torch import WindowDataset  # noqa: E402
from replaybuf_core.torch.batch import Batch  # noqa: E402
from replaybuf_core.torch.rows import BatchRow  # noqa: E402

DTYPES = [torch.float32, torch.uint8, torch.int64, torch.bool, torch.float64]


@settings(max_examples=40, deadline=None)
@given(size=st.integers(1, 9), step=st.lists(st.integers(1, 4), max_size=3), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**16))
def test_default_collate_gives_back_the_batch_tensor_itself(size, step, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, 200, (size, *step), generator=g).to(dtype)
    want = torch.stack([data[i].clone() for i in range(size)])  # what torch would build, on plain tensors
    out = default_collate(Batch({"x": data, "tag": np.array([f"s{i}" for i in range(size)])}, size))
    assert type(out["x"]) is torch.Tensor and out["x"] is data  # no copy
    assert torch.equal(out["x"], want) and out["x"].dtype == dtype
    assert out["tag"] == [f"s{i}" for i in range(size)]  # strings: collated as torch does (a list)


def test_rows_are_plain_tensors_in_every_other_use():
    data = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    b = Batch({"x": data}, 4)
    rows = [b[i]["x"] for i in range(4)]
    assert isinstance(rows[0], BatchRow) and torch.equal(rows[2], data[2])
    for value in (rows[1] * 2, rows[1] + rows[2], rows[1][:3], rows[0].sum(), torch.stack(rows[::-1]),
                  torch.stack(rows[:2]), torch.cat(rows)):
        assert type(value) is torch.Tensor
    np.testing.assert_array_equal(torch.stack(rows[::-1]).numpy(), data.numpy()[::-1])  # not the shortcut
    np.testing.assert_array_equal(torch.stack(rows, dim=1).numpy(), data.numpy().T)
    np.testing.assert_array_equal(b[-1]["x"].numpy(), data[3].numpy())
    one = pickle.dumps(rows[1])
    assert len(one) < len(pickle.dumps(data)) and type(pickle.loads(one)) is torch.Tensor  # never the batch
    assert torch.equal(pickle.loads(one), data[1])


def _frames_store(tmp_path) -> str:
    rng = np.random.default_rng(3)
    rb = ReplayBuffer.create_empty("zarr", tmp_path / "s.zarr")
    for n in (9, 5, 12):
        rb.add_episode({"img": rng.integers(0, 256, (n, 8, 10, 3), dtype=np.uint8),
                        "action": rng.random((n, 2), dtype=np.float32)})
    return str(tmp_path / "s.zarr")


DELTAS = {"img": [-1, 0], "action": [0, 1, 2]}


@pytest.mark.parametrize("workers", [0, 2])
def test_torch_defaults_return_the_samplers_batches(tmp_path, workers):
    path = _frames_store(tmp_path)
    ds = WindowDataset(functools.partial(ReplayBuffer.create_from_path, path), DELTAS, keys=list(DELTAS),
                       channels_first=True, float_images=True)
    sampler = WindowSampler(ReplayBuffer.create_from_path(path), DELTAS, keys=list(DELTAS))
    order = np.random.default_rng(7).permutation(len(ds)).tolist()  # shuffled, known to the test
    got = list(DataLoader(ds, batch_size=4, sampler=order, num_workers=workers))  # default_collate
    assert sum(len(b["action"]) for b in got) == len(ds)
    for j, batch in enumerate(got):
        idx = np.array(order[j * 4: (j + 1) * 4])
        want = sampler.sample_batch(idx)
        # the conversion, done independently: HWC uint8 -> CHW float32 / 255 in torch
        img = torch.from_numpy(want["img"]).permute(0, 1, 4, 2, 3).float() / 255
        assert type(batch["img"]) is torch.Tensor and batch["img"].dtype == torch.float32
        assert torch.equal(batch["img"], img)
        np.testing.assert_array_equal(batch["action"].numpy(), want["action"])
        np.testing.assert_array_equal(batch["img_is_pad"].numpy(), want["img_is_pad"])

    shuffled = list(DataLoader(ds, batch_size=4, shuffle=True, num_workers=workers))  # torch's own shuffle
    every = sampler.sample_batch(np.arange(len(ds)))["action"].reshape(len(ds), -1)
    seen = np.concatenate([b["action"].numpy().reshape(len(b["action"]), -1) for b in shuffled])
    np.testing.assert_array_equal(np.unique(seen, axis=0), np.unique(every, axis=0))
