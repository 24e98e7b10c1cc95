"""Code written against the seed API (diffusion_policy's ReplayBuffer and the seed's creation
helpers) keeps working: error types, duck-typed schemas, package-top imports, empty episodes."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main


@pytest.mark.parametrize("backend", ["numpy", "zarr"])
@pytest.mark.parametrize("verb", ["drop_episode", "pop_episode"])
def test_empty_buffer_raises_a_value_error(backend, verb):
    """The seed documents ValueError; an empty sequence's pop raises IndexError: it is both."""
    rb = ReplayBuffer.create_empty(backend)
    with pytest.raises(ValueError, match="empty buffer"):
        getattr(rb, verb)()
    with pytest.raises(IndexError):
        getattr(rb, verb)()


def test_package_top_exports_the_seed_functions():
    import replaybuf_zarr
    from replaybuf_zarr import (  # noqa: F401
        DEFAULT_IMAGE_FRAMES_PER_SHARD,
        create_replay_buffer_from_synthetic,
        create_zarr_arrays,
        create_zarr_replay_buffer,
        get_image_shard_shape,
        is_uint8_image_spec,
        validate_image_frames_per_shard,
    )

    assert DEFAULT_IMAGE_FRAMES_PER_SHARD == 256
    assert set(replaybuf_zarr.__all__) >= {"create_zarr_arrays", "create_zarr_replay_buffer",
                                           "is_uint8_image_spec", "create_replay_buffer_from_synthetic"}


class SeedSchema:
    """A seed-style schema: no replaybuf base class, ``zarr_path`` a str, a ``"str"`` text key."""

    def __init__(self, zarr_path):
        self.zarr_path = zarr_path

    def get_zarr_array_specs(self):
        return {
            "camera": {"shape": (0, 16, 16, 3), "chunks": (10, 16, 16, 3), "dtype": "uint8", "needs_compressor": True},
            "proprio": {"shape": (0, 7), "chunks": (100, 7), "dtype": "float32", "needs_compressor": True},
            "language": {"shape": (0,), "chunks": (100,), "dtype": "str", "needs_compressor": False},
        }


def _seed_episodes(n, seed=0):
    rng = np.random.default_rng(seed)
    for i in range(n):
        t = 5 + i
        yield {"camera": rng.integers(0, 256, (t, 16, 16, 3), dtype=np.uint8),
               "proprio": rng.random((t, 7)).astype(np.float32),
               "language": np.array([f"pick block {i}"] * t)}


@pytest.mark.parametrize("as_path", [False, True])
def test_create_zarr_replay_buffer_takes_a_seed_style_schema(tmp_path, as_path):
    from replaybuf_zarr import create_zarr_replay_buffer

    path = tmp_path / "seed.zarr"
    episodes = list(_seed_episodes(3))
    rb = create_zarr_replay_buffer(SeedSchema(path if as_path else str(path)), iter(episodes), total_episodes=3,
                                   progress=False)
    rb.close()
    # read back with plain zarr-python: the independent path
    g = zarr.open_group(str(path), mode="r")
    np.testing.assert_array_equal(g["meta/episode_ends"][:], np.cumsum([5, 6, 7]))
    np.testing.assert_array_equal(g["data/camera"][:], np.concatenate([e["camera"] for e in episodes]))  # lossless
    np.testing.assert_array_equal(g["data/proprio"][:], np.concatenate([e["proprio"] for e in episodes]))
    assert list(g["data/language"][:]) == [s for e in episodes for s in e["language"].tolist()]


def test_seed_style_schema_episodes_are_validated_from_the_specs(tmp_path):
    from replaybuf_zarr import create_zarr_replay_buffer

    bad = next(_seed_episodes(1))
    bad["proprio"] = bad["proprio"][:, :6]
    with pytest.raises(ValueError, match="episode 0, key 'proprio'"):
        create_zarr_replay_buffer(SeedSchema(str(tmp_path / "s.zarr")), [bad], progress=False)


def test_an_object_without_the_schema_protocol_is_a_type_error(tmp_path):
    from replaybuf_zarr import create_zarr_replay_buffer

    with pytest.raises(TypeError, match="zarr_path.*get_zarr_array_specs"):
        create_zarr_replay_buffer(object(), [], progress=False)
    assert not any(tmp_path.iterdir())


def _store_with_empty_episodes(path):
    g = zarr.open_group(str(path), mode="w", zarr_format=2)
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    g.create_array("data/x", data=x, chunks=(4, 2))
    g.create_array("meta/episode_ends", data=np.array([3, 3, 7, 7, 7, 10], dtype=np.int64))
    return x


def test_import_refuses_empty_episodes_by_name(tmp_path):
    from replaybuf_core.formats.diffusion_policy import import_diffusion_policy

    _store_with_empty_episodes(tmp_path / "src.zarr")
    with pytest.raises(ValueError, match=r"episode\(s\) 1, 3, 4 of 6 have zero length.*drop-empty-episodes"):
        import_diffusion_policy(tmp_path / "src.zarr", tmp_path / "dst.zarr", progress=False)
    assert not (tmp_path / "dst.zarr").exists()
    assert main(["import", "diffusion-policy", str(tmp_path / "src.zarr"), str(tmp_path / "dst.zarr"),
                 "--no-progress"]) != 0
    assert not (tmp_path / "dst.zarr").exists()


def test_import_drops_empty_episodes_when_asked_and_records_them(tmp_path, capsys):
    x = _store_with_empty_episodes(tmp_path / "src.zarr")
    rc = main(["import", "diffusion-policy", str(tmp_path / "src.zarr"), str(tmp_path / "dst.zarr"),
               "--no-progress", "--drop-empty-episodes"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "dropped 3 zero-length source episode(s): [1, 3, 4]" in out
    g = zarr.open_group(str(tmp_path / "dst.zarr"), mode="r")
    np.testing.assert_array_equal(g["meta/episode_ends"][:], [3, 7, 10])
    np.testing.assert_array_equal(g["data/x"][:], x)
    assert g["data"].attrs["import"]["dropped_empty_episodes"] == [1, 3, 4]
