"""Tests of replaybuf_core.synthetic (multimodal synthetic data sets)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from replaybuf_core.synthetic import (
    AGENT_COLOUR,
    BACKGROUND_COLOUR,
    CUE_COLOURS,
    CUE_RECT,
    EPISODE_KEYS,
    MAX_REDRAWS,
    TASK_NAMES,
    Circle,
    Rect,
    SyntheticSchema,
    TrajectoryRecorder,
    distance_to_obstacles,
    episode_modes,
    generate_task_episodes,
    plot_trajectories,
    position_to_pixel,
    resolve_generation_arguments,
    task_geometry,
    task_obstacles,
)

# (task, extra kwargs, expected number of modes)
TASK_CASES = [
    ("circle", {}, 2),
    ("conditional_circle", {}, 2),
    ("sequential_decision", {}, 4),
    ("radial", {"num_modes": 5}, 5),
    ("corridor_navigation", {"num_modes": 4}, 4),
    ("corridor_navigation", {"num_modes": 2, "num_styles": 3}, 6),
]


def _episodes(task, n=4, seed=0, **kwargs):
    return list(generate_task_episodes(task, n, seed, **kwargs))


def _cue_centre_pixel(image_size):
    centre = ((CUE_RECT.x0 + CUE_RECT.x1) / 2, (CUE_RECT.y0 + CUE_RECT.y1) / 2)
    return tuple(position_to_pixel(centre, image_size))


# ----------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("task,kwargs,num_modes", TASK_CASES)
def test_shapes_and_dtypes(task, kwargs, num_modes):
    eps = _episodes(task, n=3, image_size=32, trajectory_length=17, **kwargs)
    assert len(eps) == 3
    for ep in eps:
        assert tuple(ep) == EPISODE_KEYS
        assert ep["image"].shape == (17, 32, 32, 3) and ep["image"].dtype == np.uint8
        assert ep["position"].shape == (17, 2) and ep["position"].dtype == np.float32
        assert ep["action"].shape == (17, 2) and ep["action"].dtype == np.float32
        assert ep["mode_id"].shape == (17, 1) and ep["mode_id"].dtype == np.uint8
        assert ep["context"].shape == (17, num_modes) and ep["context"].dtype == np.float32
        assert np.all((ep["position"] >= 0) & (ep["position"] <= 1))
        assert np.all(ep["mode_id"] == ep["mode_id"][0, 0]) and ep["mode_id"][0, 0] < num_modes


def test_every_task_is_covered():
    assert {case[0] for case in TASK_CASES} == set(TASK_NAMES)


def test_zero_episodes_yields_nothing():
    assert _episodes("circle", n=0) == []


def test_context_zero_or_one_hot():
    for ep in _episodes("conditional_circle", n=6, image_size=8):
        expected = np.zeros((60, 2), np.float32)
        expected[:, ep["mode_id"][0, 0]] = 1
        np.testing.assert_array_equal(ep["context"], expected)
    for task in ("circle", "sequential_decision", "radial"):
        for ep in _episodes(task, n=3, image_size=8):
            assert not ep["context"].any()


def test_default_num_modes_per_task():
    assert task_geometry("circle").total_modes == 2
    assert task_geometry("sequential_decision").total_modes == 4
    assert task_geometry("radial").total_modes == 2
    assert task_geometry("corridor_navigation", 6, 2).total_modes == 12
    assert task_geometry("sequential_decision", 4).mode_labels() == ("LL", "LR", "RL", "RR")


# ----------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("task,kwargs,num_modes", TASK_CASES)
def test_same_seed_identical_bytes_different_seed_differs(task, kwargs, num_modes):
    a = _episodes(task, n=4, seed=7, image_size=16, trajectory_length=12, **kwargs)
    b = _episodes(task, n=4, seed=7, image_size=16, trajectory_length=12, **kwargs)
    c = _episodes(task, n=4, seed=8, image_size=16, trajectory_length=12, **kwargs)
    for ea, eb in zip(a, b):
        for key in EPISODE_KEYS:
            assert ea[key].tobytes() == eb[key].tobytes()
    assert any(ea["position"].tobytes() != ec["position"].tobytes() for ea, ec in zip(a, c))


def test_schema_episodes_match_generator_and_restart():
    schema = SyntheticSchema("/tmp/x.zarr", task_name="radial", num_episodes=3, seed=5, image_size=16, num_modes=3)
    direct = _episodes("radial", n=3, seed=5, image_size=16, num_modes=3)
    for _ in range(2):  # each call starts afresh
        for es, ed in zip(schema.episodes(), direct):
            for key in EPISODE_KEYS:
                np.testing.assert_array_equal(es[key], ed[key])


# ----------------------------------------------------------------------------- balance and weights


@pytest.mark.parametrize("n,m", [(11, 4), (4, 4), (3, 4), (0, 2), (101, 6)])
def test_balanced_counts_remainder_to_first_modes(n, m):
    settings_ = resolve_generation_arguments("radial", n, 3, num_modes=m)
    modes = episode_modes(settings_, np.random.default_rng(3))
    counts = np.bincount(modes, minlength=m)
    expected = np.full(m, n // m)
    expected[: n % m] += 1
    np.testing.assert_array_equal(counts, expected)


def test_balanced_modes_in_stream_are_shuffled_and_seeded():
    def modes(seed):
        return [int(ep["mode_id"][0, 0]) for ep in _episodes("sequential_decision", n=20, seed=seed, image_size=8, trajectory_length=2)]

    m1 = modes(1)
    assert np.bincount(m1, minlength=4).tolist() == [5, 5, 5, 5]
    assert m1 == modes(1)
    assert m1 != sorted(m1)
    assert m1 != modes(2)


def test_mode_weights_statistics():
    settings_ = resolve_generation_arguments("corridor_navigation", 4000, 0, num_modes=2, num_styles=2, mode_weights=[6, 2, 0, 2])
    modes = episode_modes(settings_, np.random.default_rng(0))
    freq = np.bincount(modes, minlength=4) / len(modes)
    np.testing.assert_allclose(freq, [0.6, 0.2, 0.0, 0.2], atol=0.03)
    assert freq[2] == 0
    # through the generator: a zero-weight mode never appears
    eps = _episodes("circle", n=10, image_size=8, trajectory_length=2, mode_weights=[0, 1])
    assert all(ep["mode_id"][0, 0] == 1 for ep in eps)


# ----------------------------------------------------------------------------- geometry


@pytest.mark.parametrize(
    "task,kwargs",
    [
        ("radial", {"num_modes": 2}),
        ("radial", {"num_modes": 3}),
        ("radial", {"num_modes": 8}),
        ("radial", {"num_modes": 12}),
        ("corridor_navigation", {"num_modes": 2}),
        ("corridor_navigation", {"num_modes": 6}),
        ("corridor_navigation", {"num_modes": 4, "num_styles": 3}),
        ("sequential_decision", {}),
        ("circle", {}),
    ],
)
def test_trajectories_clear_of_obstacles_default_noise(task, kwargs):
    obstacles = task_obstacles(task, **kwargs)
    assert obstacles
    for ep in generate_task_episodes(task, 120, 11, image_size=8, **kwargs):
        assert distance_to_obstacles(ep["position"], obstacles).min() > 0


def test_clean_paths_keep_clearance_of_several_sigmas():
    for task, kwargs in [("radial", {"num_modes": 8}), ("corridor_navigation", {"num_modes": 4}), ("sequential_decision", {}), ("circle", {})]:
        geometry = task_geometry(task, **kwargs)
        for mode in range(geometry.total_modes):
            assert distance_to_obstacles(geometry.clean_path(mode, 200), geometry.obstacles).min() > 5 * 0.008


def test_circle_loops_close_and_stay_on_radius():
    sigma = 0.008
    for task in ("circle", "conditional_circle"):
        for ep in _episodes(task, n=20, image_size=8, noise_std=sigma):
            pos = ep["position"].astype(np.float64)
            mode = ep["mode_id"][0, 0]
            assert np.linalg.norm(pos[0] - pos[-1]) < 8 * sigma
            assert np.linalg.norm(pos[0] - (0.5, 0.5)) < 6 * sigma
            centre = (0.5, 0.7) if mode == 0 else (0.5, 0.3)
            radius = np.linalg.norm(pos - centre, axis=1)
            assert np.abs(radius - 0.2).max() < 6 * sigma
            assert abs(radius.mean() - 0.2) < sigma


def test_circle_modes_trace_distinct_circles_noise_free():
    geometry = task_geometry("circle")
    upper, lower = geometry.clean_path(0, 41), geometry.clean_path(1, 41)
    np.testing.assert_allclose(upper[0], (0.5, 0.5), atol=1e-12)
    np.testing.assert_allclose(upper[-1], (0.5, 0.5), atol=1e-12)
    assert upper[:, 1].min() >= 0.5 - 1e-12 and lower[:, 1].max() <= 0.5 + 1e-12
    assert upper[1, 0] > 0.5 and lower[1, 0] > 0.5  # figure eight: both leave to the right


def test_sequential_decision_branches():
    geometry = task_geometry("sequential_decision")
    ends = [geometry.clean_path(m, 50)[-1] for m in range(4)]
    xs = [e[0] for e in ends]
    assert xs == sorted(xs)  # LL, LR, RL, RR from left to right
    starts = {tuple(geometry.clean_path(m, 50)[0]) for m in range(4)}
    assert starts == {(0.5, 0.05)}


def test_corridor_styles_are_distinct_and_gaps_off_centre():
    geometry = task_geometry("corridor_navigation", 4, 3)
    paths = [geometry.clean_path(m, 80) for m in range(12)]
    for i in range(12):
        for j in range(i + 1, 12):
            assert np.abs(paths[i] - paths[j]).max() > 0.02
    # the straight line y = 0.5 hits the wall
    line = np.stack([np.linspace(0, 1, 500), np.full(500, 0.5)], axis=-1)
    assert distance_to_obstacles(line, geometry.obstacles).min() <= 0


def test_action_is_position_difference():
    for task, kwargs, _ in TASK_CASES:
        for ep in _episodes(task, n=2, image_size=8, trajectory_length=9, **kwargs):
            np.testing.assert_array_equal(ep["action"][:-1], np.diff(ep["position"], axis=0))
            assert not ep["action"][-1].any()


def test_noise_free_positions_equal_clean_path():
    ep = _episodes("radial", n=1, image_size=8, num_modes=4, noise_std=0.0)[0]
    clean = task_geometry("radial", 4, noise_std=0.0).clean_path(int(ep["mode_id"][0, 0]), 60)
    np.testing.assert_array_equal(ep["position"], clean.astype(np.float32))


# ----------------------------------------------------------------------------- rendering


def test_position_to_pixel_mapping():
    assert tuple(position_to_pixel((0.0, 0.0), 64)) == (63, 0)  # bottom-left
    assert tuple(position_to_pixel((1.0, 1.0), 64)) == (0, 63)  # top-right
    assert tuple(position_to_pixel((0.5, 0.25), 9)) == (6, 4)
    out = position_to_pixel(np.zeros((3, 5, 2)), 16)
    assert out.shape == (3, 5, 2) and out.dtype == np.int64


@pytest.mark.parametrize("task,kwargs,num_modes", TASK_CASES)
@pytest.mark.parametrize("image_size", [8, 64])
def test_agent_pixel_at_position(task, kwargs, num_modes, image_size):
    for ep in _episodes(task, n=2, image_size=image_size, trajectory_length=15, **kwargs):
        for t in range(15):
            row, col = position_to_pixel(ep["position"][t], image_size)
            assert tuple(ep["image"][t, row, col]) == AGENT_COLOUR


def test_frames_show_background_obstacles_and_trail():
    ep = _episodes("sequential_decision", n=1, image_size=64)[0]
    last = ep["image"][-1]
    colours = {tuple(c) for c in last.reshape(-1, 3)}
    assert BACKGROUND_COLOUR in colours and AGENT_COLOUR in colours
    assert len(colours) >= 4  # + obstacles + trail
    first = ep["image"][0]
    # the trail accumulates: the last frame has more non-background pixels than the first
    assert (ep["image"][-1] != BACKGROUND_COLOUR).any(-1).sum() > (first != BACKGROUND_COLOUR).any(-1).sum()


def test_cue_square_present_and_differs_between_modes():
    size = 32
    row, col = _cue_centre_pixel(size)
    by_mode = {}
    for ep in _episodes("conditional_circle", n=6, image_size=size):
        mode = int(ep["mode_id"][0, 0])
        cue = {tuple(px) for px in ep["image"][:, row, col]}
        assert cue == {CUE_COLOURS[mode]}
        by_mode[mode] = ep["image"][0, row - 1 : row + 2, col - 1 : col + 2]
    assert set(by_mode) == {0, 1}
    assert not np.array_equal(by_mode[0], by_mode[1])
    assert CUE_COLOURS[0] != CUE_COLOURS[1]
    # the unconditional circle task shows no cue
    for ep in _episodes("circle", n=2, image_size=size):
        assert tuple(ep["image"][0, row, col]) == BACKGROUND_COLOUR


# ----------------------------------------------------------------------------- plot


def test_plot_png_opens_with_expected_size(tmp_path):
    schema = SyntheticSchema(tmp_path / "set.zarr", task_name="corridor_navigation", num_modes=4, num_styles=2, num_episodes=16, image_size=8)
    recorder = schema.trajectory_recorder()
    for ep in schema.episodes():
        recorder.add(ep)
    assert len(recorder) == 16
    path = recorder.save(schema.trajectory_plot_path())
    assert path == tmp_path / "set_trajectories.png"
    with Image.open(path) as img:
        assert img.format == "PNG" and img.size == (800, 600)


def test_plot_trajectories_direct_call(tmp_path):
    positions = [np.array([[0.1, 0.1], [0.5, 0.5], [0.9, 0.2]]), np.array([[0.2, 0.8], [0.3, 0.7]])]
    out = plot_trajectories(
        positions, [0, np.array([[1], [1]])], "demo", [Circle(0.5, 0.5, 0.1), Rect(0.1, 0.1, 0.2, 0.3)],
        tmp_path / "sub" / "p.png", figsize=(4, 3), dpi=50,
    )
    with Image.open(out) as img:
        assert img.size == (200, 150)
    with pytest.raises(ValueError, match="mode ids"):
        plot_trajectories(positions, [0], "demo", [], tmp_path / "bad.png")
    with pytest.raises(ValueError, match=r"shape \(T, 2\)"):
        plot_trajectories([np.zeros((3, 3))], [0], "demo", [], tmp_path / "bad.png")
    with pytest.raises(ValueError, match="mode_id is required"):
        TrajectoryRecorder("demo", []).add(np.zeros((3, 2)))


def test_plot_empty_dataset(tmp_path):
    out = TrajectoryRecorder("circle", task_obstacles("circle")).save(tmp_path / "empty.png")
    with Image.open(out) as img:
        assert img.size == (800, 600)


# ----------------------------------------------------------------------------- schema


def test_schema_paths_and_specs():
    schema = SyntheticSchema("~/data/run.zarr", task_name="corridor_navigation", num_modes=4, num_styles=2, image_size=32)
    assert schema.zarr_path == Path.home() / "data" / "run.zarr"
    assert schema.trajectory_plot_path() == Path.home() / "data" / "run_trajectories.png"
    assert SyntheticSchema("a/b/plain").trajectory_plot_path() == Path("a/b/plain_trajectories.png")
    assert SyntheticSchema(Path("x.y.zarr")).trajectory_plot_path() == Path("x.y_trajectories.png")
    specs = schema.array_specs()
    assert tuple(specs) == EPISODE_KEYS
    assert specs["image"] == {"shape": (0, 32, 32, 3), "chunks": (1, 32, 32, 3), "dtype": np.dtype(np.uint8), "needs_compressor": True}
    assert specs["position"]["shape"] == (0, 2) and specs["position"]["dtype"] == np.float32
    assert specs["action"]["chunks"] == (1024, 2)
    assert specs["mode_id"]["shape"] == (0, 1) and specs["mode_id"]["dtype"] == np.uint8
    assert specs["context"]["shape"] == (0, 8) and specs["context"]["chunks"] == (1024, 8)
    assert all(isinstance(s["needs_compressor"], bool) for s in specs.values())
    # specs agree with real episodes
    ep = next(iter(dataclasses.replace(schema, num_episodes=1).episodes()))
    for key, spec in specs.items():
        assert ep[key].shape[1:] == spec["shape"][1:] and ep[key].dtype == spec["dtype"]


def test_schema_defaults_and_normalisation():
    schema = SyntheticSchema("d.zarr")
    assert (schema.task_name, schema.num_episodes, schema.seed, schema.image_size) == ("circle", 1000, 42, 64)
    assert (schema.trajectory_length, schema.noise_std, schema.num_styles, schema.total_modes) == (60, 0.008, 1, 2)
    weighted = SyntheticSchema("d.zarr", num_episodes=np.int64(5), mode_weights=np.array([1, 3]))
    assert weighted.mode_weights == (1.0, 3.0) and type(weighted.num_episodes) is int
    with pytest.raises(dataclasses.FrozenInstanceError):
        schema.num_episodes = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="num_episodes"):
        dataclasses.replace(schema, num_episodes=-1)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"zarr_path": ""}, ValueError, "zarr_path"),
        ({"zarr_path": 3}, TypeError, "zarr_path"),
        ({"zarr_path": b"x.zarr"}, TypeError, "zarr_path"),
        ({"task_name": "square"}, ValueError, "unknown task_name"),
        ({"num_episodes": -1}, ValueError, "num_episodes"),
        ({"image_size": 4}, ValueError, "image_size"),
        ({"num_modes": 3}, ValueError, "exactly 2 modes"),
        ({"mode_weights": [1.0]}, ValueError, "mode_weights"),
    ],
)
def test_schema_validation(kwargs, exc, match):
    args = {"zarr_path": "d.zarr", **kwargs}
    with pytest.raises(exc, match=match):
        SyntheticSchema(**args)


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "args,kwargs,exc,match",
    [
        (("triangle", 1, 0), {}, ValueError, "unknown task_name 'triangle'.*circle, conditional_circle, sequential_decision, radial, corridor_navigation"),
        (("circle", -1, 0), {}, ValueError, "num_episodes must be >= 0, got -1"),
        (("circle", 2.5, 0), {}, TypeError, "num_episodes must be an int"),
        (("circle", True, 0), {}, TypeError, "num_episodes"),
        (("circle", 1, -3), {}, ValueError, "seed"),
        (("circle", 1, 0), {"image_size": 7}, ValueError, "image_size must be >= 8, got 7"),
        (("circle", 1, 0), {"trajectory_length": 1}, ValueError, "trajectory_length must be >= 2, got 1"),
        (("circle", 1, 0), {"noise_std": -0.1}, ValueError, "noise_std"),
        (("circle", 1, 0), {"noise_std": float("nan")}, ValueError, "noise_std"),
        (("circle", 1, 0), {"num_modes": 3}, ValueError, "'circle' has exactly 2 modes, got num_modes=3"),
        (("conditional_circle", 1, 0), {"num_modes": 4}, ValueError, "exactly 2 modes"),
        (("sequential_decision", 1, 0), {"num_modes": 2}, ValueError, "'sequential_decision' has exactly 4 modes"),
        (("radial", 1, 0), {"num_modes": 1}, ValueError, "num_modes >= 2"),
        (("corridor_navigation", 1, 0), {"num_modes": 3}, ValueError, "even num_modes.*got num_modes=3"),
        (("corridor_navigation", 1, 0), {"num_modes": 42}, ValueError, "at most 40 gaps"),
        (("corridor_navigation", 1, 0), {"num_modes": 40, "num_styles": 7}, ValueError, "exceeds 256"),
        (("radial", 1, 0), {"num_styles": 2}, ValueError, "num_styles=2 is only supported by 'corridor_navigation'"),
        (("corridor_navigation", 1, 0), {"num_styles": 0}, ValueError, "num_styles"),
        (("circle", 1, 0), {"mode_weights": [1, 2, 3]}, ValueError, "mode_weights has 3 entries but task 'circle' has 2 modes"),
        (("corridor_navigation", 1, 0), {"num_styles": 2, "mode_weights": [1, 1]}, ValueError, "has 4 modes"),
        (("circle", 1, 0), {"mode_weights": [1, -1]}, ValueError, "mode_weights must be >= 0"),
        (("circle", 1, 0), {"mode_weights": [0, 0]}, ValueError, "must not all be zero"),
        (("circle", 1, 0), {"mode_weights": [np.inf, 1]}, ValueError, "finite"),
        (("circle", 1, 0), {"mode_weights": "ab"}, TypeError, "mode_weights"),
    ],
)
def test_argument_errors_raised_at_call_time(args, kwargs, exc, match):
    # no iteration: validation happens when the generator function is called
    with pytest.raises(exc, match=match):
        generate_task_episodes(*args, **kwargs)


def test_radial_too_tight_raises_runtime_error():
    episodes = generate_task_episodes("radial", 2, 0, image_size=8, num_modes=64)
    with pytest.raises(RuntimeError, match=rf"too tight.*|{MAX_REDRAWS} attempt"):
        next(episodes)
    with pytest.raises(RuntimeError, match="too tight"):
        next(generate_task_episodes("radial", 1, 0, image_size=8, num_modes=64, noise_std=0.0))


def test_radial_obstacles_shrink_with_noise():
    wide = task_obstacles("radial", 8, noise_std=0.0)
    narrow = task_obstacles("radial", 8, noise_std=0.01)
    assert all((w.x1 - w.x0) > (n.x1 - n.x0) for w, n in zip(wide, narrow))


def test_package_does_not_import_zarr():
    code = "import sys, replaybuf_core.synthetic as s; list(s.generate_task_episodes('circle', 1, 0, image_size=8)); print('zarr' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------------------- properties


@settings(max_examples=30, deadline=None)
@given(
    case=st.sampled_from(TASK_CASES),
    n=st.integers(0, 3),
    seed=st.integers(0, 2**32),
    image_size=st.integers(8, 24),
    t_len=st.integers(2, 20),
    noise=st.sampled_from([0.0, 0.002, 0.008]),
)
def test_property_episode_invariants(case, n, seed, image_size, t_len, noise):
    task, kwargs, num_modes = case
    obstacles = task_obstacles(task, noise_std=noise, **kwargs)
    eps = list(generate_task_episodes(task, n, seed, image_size=image_size, trajectory_length=t_len, noise_std=noise, **kwargs))
    assert len(eps) == n
    for ep in eps:
        pos = ep["position"]
        assert ep["image"].shape == (t_len, image_size, image_size, 3)
        assert ep["context"].shape == (t_len, num_modes)
        assert np.all((pos >= 0) & (pos <= 1))
        assert distance_to_obstacles(pos, obstacles).min() > 0
        np.testing.assert_array_equal(ep["action"][:-1], np.diff(pos, axis=0))
        assert not ep["action"][-1].any()
        pix = position_to_pixel(pos, image_size)
        assert np.all(ep["image"][np.arange(t_len), pix[:, 0], pix[:, 1]] == AGENT_COLOUR)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 60), m=st.integers(2, 9), seed=st.integers(0, 10**6))
def test_property_balanced_counts(n, m, seed):
    modes = episode_modes(resolve_generation_arguments("radial", n, seed, num_modes=m), np.random.default_rng(seed))
    counts = np.bincount(modes, minlength=m)
    assert counts.sum() == n and counts.max() - counts.min() <= 1
    assert np.all(np.diff(counts) <= 0)  # remainder goes to the first modes


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0, 10, allow_nan=False), min_size=2, max_size=2).filter(lambda w: sum(w) > 0))
def test_property_weights_normalised(weights):
    s = resolve_generation_arguments("circle", 1, 0, mode_weights=weights)
    assert s.mode_weights is not None and abs(s.mode_weights.sum() - 1) < 1e-12
