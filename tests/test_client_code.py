"""Real clients' code paths on our stores: diffusion_policy's dataset code (its sampler and
``PushTImageDataset._sample_to_data``, :mod:`replaybuf_core.testing.diffusion_policy_client`) on an
imported Push-T store, and a LeRobot-style training batch under torch's ``default_collate``.

Expected values: the Push-T source read with zarr-python into plain NumPy — diffusion_policy's own
in-memory buffer is exactly that (``ReplayBuffer.copy_from_path`` loads every array into memory).
"""

from __future__ import annotations

import numpy as np
import pytest

from replaybuf_core import ReplayBuffer
from replaybuf_core.testing.diffusion_policy_client import (ClientSequenceSampler, InMemoryBuffer, linear_normalizer_fit,
                                                           pusht_normalizer_data, pusht_sample_to_data)

from shared_data import PUSHT, requires_pusht

KEYS = ["img", "state", "action"]
SETTINGS = dict(sequence_length=16, pad_before=1, pad_after=7, keys=KEYS, key_first_k={"img": 2, "state": 2})


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    if not PUSHT.is_dir():
        pytest.skip(f"Push-T data not found at {PUSHT}")
    from replaybuf_core.cli import main

    dst = tmp_path_factory.mktemp("client") / "pusht.zarr"
    assert main(["import", str(PUSHT), str(dst), "--episodes", "0:3", "--no-progress"]) == 0
    return dst


@requires_pusht
@pytest.mark.parametrize("warm", [False, True])
def test_diffusion_policy_dataset_code_reads_an_imported_store_like_its_own_buffer(imported, warm):
    theirs = ClientSequenceSampler(InMemoryBuffer(PUSHT, KEYS, 3), **SETTINGS)
    rb = ReplayBuffer.create_from_path(imported)
    if warm:
        rb.warm(KEYS)
    ours = ClientSequenceSampler(rb, **SETTINGS)
    assert len(ours) == len(theirs) > 0
    for idx in np.random.default_rng(0).choice(len(ours), 40, replace=False).tolist() + [0, len(ours) - 1]:
        a, b = ours.sample_sequence(idx), theirs.sample_sequence(idx)
        for key in KEYS:
            np.testing.assert_array_equal(a[key][:2] if key in ("img", "state") else a[key],
                                          b[key][:2] if key in ("img", "state") else b[key], err_msg=f"{key} {idx}")
        assert a["img"].dtype == b["img"].dtype == np.float32  # the source's dtype, not the stored uint8
        da, db = pusht_sample_to_data(a), pusht_sample_to_data(b)
        assert da["obs"]["image"].dtype == np.float32  # uint8 / 255 would be float64: its model refuses that
        np.testing.assert_array_equal(da["obs"]["image"][:2], db["obs"]["image"][:2])
        np.testing.assert_array_equal(da["action"], db["action"])


@requires_pusht
@pytest.mark.parametrize("warm", [False, True])
def test_diffusion_policy_normalizer_fits_an_opened_store_like_its_own_buffer(imported, warm):
    """``PushTImageDataset.get_normalizer`` on ``create_from_path`` (cold and after ``warm``): its
    normaliser calls ``.type()`` on whatever is not an ``np.ndarray`` (issue 47 item 5)."""
    torch = pytest.importorskip("torch")
    theirs = pusht_normalizer_data(InMemoryBuffer(PUSHT, KEYS, 3))
    rb = ReplayBuffer.create_from_path(imported)
    if warm:
        rb.warm(KEYS)
    ours = pusht_normalizer_data(rb)
    assert isinstance(ours["action"], np.ndarray) and isinstance(ours["agent_pos"], np.ndarray)
    for key in theirs:
        for a, b in zip(linear_normalizer_fit(ours[key]), linear_normalizer_fit(theirs[key])):
            assert a.dtype == b.dtype == torch.float32
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_lerobot_style_training_batch_through_default_collate(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from replaybuf_core.torch import WindowDataset

    rng = np.random.default_rng(2)
    rb = ReplayBuffer.create_empty("zarr", tmp_path / "s.zarr")
    eps = [{"observation.images.front": rng.integers(0, 256, (n, 12, 16, 3), dtype=np.uint8),
            "observation.state": rng.random((n, 6), dtype=np.float32),
            "action": rng.random((n, 6), dtype=np.float32)} for n in (20, 13)]
    with rb.writer(frames="exact") as w:
        for ep in eps:
            w.add_episode(ep)
    # LeRobot's delta_timestamps at 10 fps: the current frame and state, 8 future actions
    fps = 10
    ds = WindowDataset(str(tmp_path / "s.zarr"), fps=fps, channels_first=True, float_images=True,
                       delta_timestamps={"observation.images.front": [0.0], "observation.state": [-0.1, 0.0],
                                         "action": [i / fps for i in range(8)]})
    batch = next(iter(DataLoader(ds, batch_size=8, shuffle=True)))  # torch's defaults, as LeRobot's loop
    img = batch["observation.images.front"]
    assert type(img) is torch.Tensor and img.dtype == torch.float32 and tuple(img.shape) == (8, 1, 3, 12, 16)
    assert 0.0 <= float(img.min()) and float(img.max()) <= 1.0
    assert tuple(batch["action"].shape) == (8, 8, 6) and batch["action_is_pad"].dtype == torch.bool
    frames = np.concatenate([e["observation.images.front"] for e in eps])
    flat = frames.reshape(len(frames), -1).astype(np.float32) / 255
    for sample in img[:, 0].permute(0, 2, 3, 1).reshape(8, -1).numpy():  # each is one stored frame, exact
        assert (np.abs(flat - sample).max(axis=1) == 0).any()
