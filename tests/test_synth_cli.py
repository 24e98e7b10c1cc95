"""`replaybuf synth` and create_replay_buffer_from_synthetic: the README's main job."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_core.synthetic import SyntheticSchema
from replaybuf_zarr.codecs import WebPCodec
from replaybuf_core.synthetic import create_replay_buffer_from_synthetic


def test_synthetic_buffer_equals_the_generator_and_saves_the_plot(tmp_path):
    schema = SyntheticSchema(tmp_path / "demo.zarr", task_name="radial", num_episodes=12, num_modes=3,
                             image_size=32, trajectory_length=20, seed=3)
    rb, png = create_replay_buffer_from_synthetic(schema, image_frames_per_shard=64, progress=False)
    assert png == tmp_path / "demo_trajectories.png"
    assert Image.open(png).size == (800, 600)
    again = ReplayBuffer.create_from_path(tmp_path / "demo.zarr")
    assert again.n_episodes == 12 and again.n_steps == 240
    for i, ep in enumerate(schema.episodes()):
        got = again.get_episode(i)
        for key in ep:  # lossless frames: bit-exact
            np.testing.assert_array_equal(got[key], ep[key])
    assert again.get_compressors()["image"] == WebPCodec(level=0, lossless=True, method=1)  # the exact tier (small frames), the default
    assert again.store.shards("data", "image") == (64, 32, 32, 3)


@pytest.mark.parametrize("fps, error", [(0, ValueError), (3.5, TypeError)])
def test_bad_frames_per_shard_writes_nothing(tmp_path, fps, error):
    schema = SyntheticSchema(tmp_path / "x.zarr", num_episodes=2, trajectory_length=5)
    with pytest.raises(error):
        create_replay_buffer_from_synthetic(schema, image_frames_per_shard=fps, progress=False)
    assert not (tmp_path / "x.zarr").exists() and not (tmp_path / "x_trajectories.png").exists()


def test_cli_synth_in_process(tmp_path, capsys):
    out = tmp_path / "c.zarr"
    rc = main(["synth", "corridor_navigation", str(out), "--episodes", "8", "--modes", "2", "--styles", "2",
               "--length", "30", "--image-size", "24", "--frames-per-shard", "0"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "8 episodes, 240 steps" in text and "bytes on disk" in text and "c_trajectories.png" in text
    rb = ReplayBuffer.create_from_path(out)
    assert rb.store.shards("data", "image") is None and int(rb["mode_id"][:].max()) <= 3


def test_cli_synth_rejects_bad_arguments(tmp_path, capsys):
    assert main(["synth", "corridor_navigation", str(tmp_path / "o.zarr"), "--modes", "3"]) == 2
    assert "even" in capsys.readouterr().err
    assert not (tmp_path / "o.zarr").exists()
    with pytest.raises(SystemExit):
        main(["synth", "no_such_task", str(tmp_path / "o.zarr")])


def test_cli_synth_subprocess(tmp_path):
    out = tmp_path / "s.zarr"
    res = subprocess.run([sys.executable, "-m", "replaybuf_core.cli", "synth", "circle", str(out),
                          "--episodes", "4", "--length", "12"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "s_trajectories.png").exists()
    assert ReplayBuffer.create_from_path(out).n_episodes == 4


def test_synth_output_verifies_clean(tmp_path):
    """All-zero arrays (context of the circle task) still store every chunk, so verify finds none missing."""
    from replaybuf_core.inspection.verify import verify_store

    out = tmp_path / "v.zarr"
    assert main(["synth", "circle", str(out), "--episodes", "6", "--length", "10"]) == 0
    problems = verify_store(out)
    assert not [p for p in problems if p.level == "error"], problems


def test_synth_refuses_an_existing_store_without_overwrite(tmp_path, capsys):
    out = tmp_path / "o.zarr"
    assert main(["synth", "circle", str(out), "--episodes", "3", "--length", "10"]) == 0
    assert main(["synth", "radial", str(out), "--episodes", "2", "--length", "10"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert ReplayBuffer.create_from_path(out).n_episodes == 3  # untouched
    assert main(["synth", "radial", str(out), "--episodes", "2", "--length", "10", "--overwrite"]) == 0
    assert ReplayBuffer.create_from_path(out).n_episodes == 2


def test_synth_never_replaces_a_store_another_process_writes_to(tmp_path, capsys):
    out = tmp_path / "l.zarr"
    assert main(["synth", "circle", str(out), "--episodes", "2", "--length", "10"]) == 0
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from replaybuf_core import ReplayBuffer; rb = ReplayBuffer(sys.argv[1]); "
        "print('held', flush=True); time.sleep(30)"), str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["synth", "circle", str(out), "--episodes", "1", "--length", "10", "--overwrite"]) == 2
        assert "open for writing by process" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    assert ReplayBuffer.create_from_path(out).n_episodes == 2


def test_cli_reports_os_errors_without_a_traceback(tmp_path, capsys):
    a_file = tmp_path / "afile.txt"
    a_file.write_text("x")
    assert main(["synth", "circle", str(a_file / "out.zarr"), "--episodes", "1", "--length", "5"]) == 2
    assert "error:" in capsys.readouterr().err
