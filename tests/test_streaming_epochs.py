"""Streaming epochs (``StreamingWindowDataset``, issue 48): every window exactly once an epoch, each
sample equal to a model built from the episodes' arrays (LeRobot's rule: offsets clamped to the
episode, padding flagged), the order fixed by ``(seed, epoch)``, workers splitting the blocks."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from replaybuf_core import ReplayBuffer  # noqa: E402
from replaybuf_core.torch import StreamingWindowDataset  # noqa: E402

LENGTHS = [7, 30, 1, 19, 44, 12]
DELTAS = {"img": [-1, 0], "act": [-1, 0, 1, 2, 3], "row": [0]}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(4)
    path = tmp_path_factory.mktemp("stream") / "s.zarr"
    eps, start = [], 0
    for n in LENGTHS:
        eps.append({"img": rng.integers(0, 256, (n, 6, 8, 3), dtype=np.uint8),
                    "act": rng.random((n, 2), dtype=np.float32),
                    "row": np.arange(start, start + n, dtype=np.int64)})
        start += n
    with ReplayBuffer.create_empty("zarr", path) as rb:
        with rb.writer(frames="exact") as w:
            for ep in eps:
                w.add_episode(ep)
    return path, eps


def model(eps, anchor_row):
    """The sample anchored at buffer row ``anchor_row``, from the episodes' arrays."""
    start = 0
    for ep in eps:
        n = len(ep["row"])
        if anchor_row < start + n:
            t = anchor_row - start
            out = {}
            for k, d in DELTAS.items():
                rel = np.array([t + x for x in d])
                out[k] = ep[k][np.clip(rel, 0, n - 1)]
                out[k + "_is_pad"] = (rel < 0) | (rel > n - 1)
            return out
        start += n
    raise AssertionError(anchor_row)


def epoch(ds, workers=0, batch_size=8):
    got = []
    for batch in torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=workers):
        for j in range(len(batch["row"])):
            got.append({k: v[j].numpy() for k, v in batch.items()})
    return got


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("block, buffer", [(5, 5), (16, 40), (200, 400)])
def test_every_window_once_an_epoch_equal_to_the_model(store, workers, block, buffer):
    path, eps = store
    ds = StreamingWindowDataset(str(path), DELTAS, block_windows=block, buffer_windows=buffer, batch_size=8)
    got = epoch(ds, workers)
    anchors = [int(s["row"][0]) for s in got]
    assert sorted(anchors) == list(range(sum(LENGTHS)))  # exactly once
    for s in got:
        want = model(eps, int(s["row"][0]))
        for k, v in want.items():
            np.testing.assert_array_equal(s[k], v, err_msg=k)


def test_the_order_is_fixed_by_seed_and_epoch(store):
    path, _ = store
    ds = StreamingWindowDataset(str(path), DELTAS, block_windows=8, buffer_windows=24, seed=3)
    order = lambda: [int(s["row"][0]) for s in epoch(ds)]  # noqa: E731
    first = order()
    assert order() == first
    ds.set_epoch(1)
    second = order()
    assert second != first and sorted(second) == sorted(first)
    assert [int(s["row"][0]) for s in epoch(StreamingWindowDataset(str(path), DELTAS, block_windows=8,
                                                                    buffer_windows=24, seed=3))] == first


def test_correlation_is_stated_and_a_buffer_below_a_block_is_refused(store):
    path, _ = store
    c = StreamingWindowDataset(str(path), DELTAS, block_windows=8, buffer_windows=16, batch_size=8).correlation()
    assert 0 < c["uniform"] <= c["streaming"] <= 1 and c["episodes"] == len(LENGTHS)
    with pytest.raises(ValueError, match="cannot hold one block: it must be at least block_windows=32"):
        StreamingWindowDataset(str(path), DELTAS, block_windows=32, buffer_windows=16)



@pytest.fixture(scope="module")
def long_store(tmp_path_factory):
    """2,000 steps in 9 episodes, small frames: enough blocks for the buffer's draws to matter."""
    path = tmp_path_factory.mktemp("stream-long") / "l.zarr"
    lengths = [300, 1, 250, 199, 400, 50, 300, 200, 300]
    with ReplayBuffer.create_empty("zarr", path) as rb:
        with rb.writer(frames="exact") as w:
            start = 0
            for n in lengths:
                w.add_episode({"img": np.zeros((n, 4, 4, 3), np.uint8), "act": np.zeros((n, 2), np.float32),
                               "row": np.arange(start, start + n, dtype=np.int64)})
                start += n
    return path, sum(lengths)


@pytest.mark.parametrize("block, buffer, batch", [(32, 128, 16), (50, 100, 64), (16, 128, 64), (8, 16, 32)])
def test_the_buffer_holds_at_most_its_blocks_and_batches_are_full(long_store, block, buffer, batch):
    """The decoded rows kept are those of the blocks with windows drawn and windows left: at most
    ``buffer // block`` of them (and what it takes to fill a batch); every batch but the last is full.  Drawn
    uniformly, a block's last windows lingered and the buffer held ever more blocks (20 of 4 on the
    G1 store, 2.8 GB of frames, each a fresh allocation: a third of the CPU), and a buffer smaller
    than a batch gave short batches."""
    path, n = long_store
    ds = StreamingWindowDataset(str(path), DELTAS, block_windows=block, buffer_windows=buffer, batch_size=batch)
    got = [b["row"][:, 0].numpy() for b in torch.utils.data.DataLoader(ds, batch_size=batch)]
    assert sorted(np.concatenate(got).tolist()) == list(range(n))  # a window's number is its anchor row here
    assert [len(g) for g in got[:-1]] == [batch] * (len(got) - 1)
    drawn: dict[int, int] = {}
    most = 0
    for g in got:
        for w in g.tolist():
            drawn[w // block] = drawn.get(w // block, 0) + 1
        most = max(most, sum(1 for b, k in drawn.items() if k < min(block, n - b * block)))
    assert most <= buffer // block + -(-batch // block), most  # (more only while too few windows for a batch)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("channels_first, float_images", [(True, True), (False, True), (True, False)])
def test_images_come_as_torch_converts_them(store, workers, channels_first, float_images):
    """LeRobot's sample format: frames gathered from the blocks and converted in one pass equal the
    model's uint8 frames converted by torch (``x.permute(...).float() / 255``), padding included."""
    path, eps = store
    ds = StreamingWindowDataset(str(path), DELTAS, block_windows=16, buffer_windows=40, batch_size=8,
                                pad_mode="zero", channels_first=channels_first, float_images=float_images)
    got = epoch(ds, workers)
    assert sorted(int(s["row"][0]) for s in got) == list(range(sum(LENGTHS)))
    for s in got:
        want = model(eps, int(s["row"][0]))
        img = torch.from_numpy(np.where(want["img_is_pad"][:, None, None, None], 0, want["img"]).astype(np.uint8))
        if channels_first:
            img = img.permute(0, 3, 1, 2)
        if float_images:
            img = img.float() / 255
        assert s["img"].dtype == img.numpy().dtype
        np.testing.assert_array_equal(s["img"], img.numpy())
        np.testing.assert_array_equal(s["img_is_pad"], want["img_is_pad"])
