"""Build the RLDS test fixture with TensorFlow Datasets' own builder and writer (not run by pytest).

TensorFlow is needed only here, never by replaybuf or its tests: run it in a throwaway environment,
e.g. ``python3.12 -m venv /tmp/tfds && /tmp/tfds/bin/pip install tensorflow-cpu tensorflow-datasets``,
then ``/tmp/tfds/bin/python tests/data/rlds/make_fixture.py``.  It writes, beside this script:

* ``toy_rlds/1.0.0/``: the TFDS prepared directory (``dataset_info.json``, ``features.json``,
  ``toy_rlds-<split>.tfrecord-0000N-of-00002`` for the splits train and val), exactly as
  ``tfds.builder(...).download_and_prepare()`` leaves it;
* ``toy_rlds_source.npz``: the arrays the episodes were built from (``<split>/<episode>/<key>`` with
  the flattened RLDS key, e.g. ``train/0/steps/observation/state``); for the JPEG camera (lossy: its
  pixels are known only by decoding) what TFDS itself reads back (``tfds_decoded/...``:
  ``tfds.as_numpy``, whose ``tf.image.decode_image`` uses libjpeg's fast IDCT) and TensorFlow's decode
  with the accurate IDCT (``tf_accurate_decoded/...``: ``tf.io.decode_jpeg(dct_method=
  "INTEGER_ACCURATE")``); and the order TFDS reads the episodes in (``tfds_order/<split>``).

The episodes are a deterministic function of their number, so the fixture is the same on every run
(TFDS's shuffling of the records into shards too: it hashes the keys).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

HERE = Path(__file__).resolve().parent
NAME = "toy_rlds"
#: steps of each episode of each split (the odd cases — an empty episode, ragged text — are in the
#: tests' hand-built streams)
LENGTHS = {"train": [5, 1, 8, 3, 6], "val": [4, 2]}
INSTRUCTIONS = ["pick up the red block", "open the drawer", "", "push the button to the left side of the table"]


def episode(split: str, i: int) -> dict[str, np.ndarray]:
    """The source arrays of episode ``i`` of ``split`` (flattened RLDS keys)."""
    rng = np.random.default_rng([0 if split == "train" else 1, i])
    t = LENGTHS[split][i]
    yy, xx = np.mgrid[0:48, 0:64]
    image = np.stack([((xx * 4 + s * 17 + i * 31)[..., None] + np.array([0, 60, 120])) % 256 for s in range(t)])
    image = ((image + yy[None, ..., None] * 2) % 256).astype(np.uint8)
    wrist = rng.integers(0, 256, (t, 16, 20, 3), dtype=np.uint8)
    depth = rng.integers(0, 65536, (t, 16, 20, 1), dtype=np.uint16)
    out = {
        "steps/observation/image": image,
        "steps/observation/wrist_image": wrist,
        "steps/observation/depth": depth,
        "steps/observation/state": rng.normal(size=(t, 8)).astype(np.float32),
        "steps/observation/gripper_open": rng.random(t) < 0.5,
        "steps/action": rng.normal(size=(t, 7)).astype(np.float32),
        "steps/action_int": rng.integers(-(2 ** 40), 2 ** 40, (t, 2), dtype=np.int64),
        "steps/reward": (np.arange(t) == t - 1).astype(np.float32),
        "steps/discount": np.ones(t, dtype=np.float32),
        "steps/is_first": np.arange(t) == 0,
        "steps/is_last": np.arange(t) == t - 1,
        "steps/is_terminal": (np.arange(t) == t - 1) & (i % 2 == 0),
        "steps/language_instruction": np.array([INSTRUCTIONS[(i + s // 3) % len(INSTRUCTIONS)] for s in range(t)],
                                               dtype=object),
        "steps/joint_pos_f64": rng.normal(size=(t, 3)).astype(np.float64),
        "episode_metadata/file_path": np.array(f"/data/{split}/episode_{i}.h5", dtype=object),
        "episode_metadata/episode_id": np.int32(100 * (split == "val") + i),
    }
    return out


def _nest(flat: dict[str, np.ndarray]) -> dict:
    out: dict = {}
    for key, value in flat.items():
        *parents, leaf = key.split("/")
        d = out
        for p in parents:
            d = d.setdefault(p, {})
        d[leaf] = value
    return out


class ToyRlds(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "replaybuf's RLDS test fixture."}

    def _info(self):
        f = tfds.features
        return tfds.core.DatasetInfo(
            builder=self,
            description="A toy RLDS dataset for replaybuf's tests.",
            features=f.FeaturesDict({
                "steps": f.Dataset({
                    "observation": f.FeaturesDict({
                        "image": f.Image(shape=(48, 64, 3), dtype=np.uint8, encoding_format="jpeg",
                                         doc="main camera, JPEG"),
                        "wrist_image": f.Image(shape=(16, 20, 3), dtype=np.uint8, encoding_format="png"),
                        "depth": f.Image(shape=(16, 20, 1), dtype=np.uint16, encoding_format="png"),
                        "state": f.Tensor(shape=(8,), dtype=np.float32, doc="joint state"),
                        "gripper_open": f.Scalar(dtype=np.bool_),
                    }),
                    "action": f.Tensor(shape=(7,), dtype=np.float32),
                    "action_int": f.Tensor(shape=(2,), dtype=np.int64),
                    "reward": f.Scalar(dtype=np.float32),
                    "discount": f.Scalar(dtype=np.float32),
                    "is_first": f.Scalar(dtype=np.bool_),
                    "is_last": f.Scalar(dtype=np.bool_),
                    "is_terminal": f.Scalar(dtype=np.bool_),
                    "language_instruction": f.Text(),
                    "joint_pos_f64": f.Tensor(shape=(3,), dtype=np.float64),
                }),
                "episode_metadata": f.FeaturesDict({
                    "file_path": f.Text(),
                    "episode_id": f.Scalar(dtype=np.int32),
                }),
            }),
            supervised_keys=None,
        )

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples(split) for split in LENGTHS}

    def _generate_examples(self, split):
        for i in range(len(LENGTHS[split])):
            flat = episode(split, i)
            flat["steps/language_instruction"] = [str(s) for s in flat["steps/language_instruction"]]
            flat["episode_metadata/file_path"] = str(flat["episode_metadata/file_path"])
            nested = _nest(flat)
            steps = nested["steps"]
            t = LENGTHS[split][i]
            rows = [_row(steps, s) for s in range(t)]
            yield f"{split}_{i}", {"steps": rows, "episode_metadata": nested["episode_metadata"]}


def _row(d: dict, s: int) -> dict:
    return {k: _row(v, s) if isinstance(v, dict) else v[s] for k, v in d.items()}


def main() -> int:
    work = HERE / "_build"
    shutil.rmtree(work, ignore_errors=True)
    builder = ToyRlds(data_dir=os.fspath(work))
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=2))
    prepared = Path(builder.data_dir)
    out = HERE / NAME / "1.0.0"
    shutil.rmtree(HERE / NAME, ignore_errors=True)
    out.parent.mkdir(parents=True)
    shutil.copytree(prepared, out)
    arrays: dict[str, np.ndarray] = {}
    for split in LENGTHS:
        for i in range(len(LENGTHS[split])):
            for key, value in episode(split, i).items():
                arrays[f"{split}/{i}/{key}"] = value
        order = []
        for ex in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)):
            i = int(ex["episode_metadata"]["episode_id"]) % 100
            order.append(i)
            imgs = np.stack([s["observation"]["image"] for s in ex["steps"]])
            arrays[f"tfds_decoded/{split}/{i}/steps/observation/image"] = imgs
        arrays[f"tfds_order/{split}"] = np.array(order, dtype=np.int64)
        # the JPEG camera decoded by TensorFlow with the accurate integer IDCT (TFDS's own decode above
        # uses tf.image.decode_image's default, the fast IDCT)
        import tensorflow as tf

        shards = sorted(str(p) for p in prepared.glob(f"{NAME}-{split}.tfrecord-*"))
        for raw in tf.data.TFRecordDataset(shards):
            ex = tf.train.Example.FromString(raw.numpy())
            i = ex.features.feature["episode_metadata/episode_id"].int64_list.value[0] % 100
            jpegs = ex.features.feature["steps/observation/image"].bytes_list.value
            arrays[f"tf_accurate_decoded/{split}/{i}/steps/observation/image"] = np.stack(
                [tf.io.decode_jpeg(b, channels=3, dct_method="INTEGER_ACCURATE").numpy() for b in jpegs])
    # text as unicode arrays: the npz holds no pickles
    np.savez_compressed(HERE / f"{NAME}_source.npz",
                        **{k: np.asarray(v, dtype=str) if np.asarray(v).dtype == object else np.asarray(v)
                           for k, v in arrays.items()})
    shutil.rmtree(work, ignore_errors=True)
    for p in sorted(out.iterdir()):
        print(f"{p.stat().st_size:8d}  {p.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
