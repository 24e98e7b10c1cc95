"""A mixture across ranks and workers: torch.distributed over gloo, each rank a process of its own
launched as torchrun launches them (tests/mixture_ddp_worker.py), 1 to 4 ranks, 0 or 2 DataLoader
workers each, on tiny stores of three schemas.

Checked: every window of every store comes exactly once an epoch (against the anchors counted from
the stores' episode lengths, not from the code); no sample twice across ranks and workers; the
global stream (step by step, ranks in order) is the same for every world size and worker count as a
single process reads it; a run SIGKILLed mid-epoch resumes from its last checkpoint — on the same or
another number of ranks — with the stream it would have had; a state of another mixture is refused
before any worker starts; torchdata's StatefulDataLoader resumes a worker's state.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mixture_helpers import anchors, make_store

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from replaybuf_core.mixture import Mixture, MixtureSource  # noqa: E402
from replaybuf_core.torch import MixtureDataset, MixtureLoader  # noqa: E402

if not dist.is_available():  # pragma: no cover
    pytest.skip("torch.distributed is not available", allow_module_level=True)

HERE = Path(__file__).resolve().parent
LENGTHS = ([5, 9, 3, 7], [11, 4], [6, 6, 2])
BATCH = 4


@pytest.fixture(scope="module")
def mixture_file(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mixture-ddp")
    a = make_store(tmp / "a.zarr", 0, LENGTHS[0], {"state": 3, "act": 3}, fps=10)
    b = make_store(tmp / "b.zarr", 1, LENGTHS[1], {"state": 5, "act": 5}, fps=20)
    c = make_store(tmp / "c.zarr", 2, LENGTHS[2], {"obs": 2}, fps=5, dtypes={"obs": "float64"})
    mix = Mixture([MixtureSource(a, keys={"act": "action"}), MixtureSource(b, keys={"act": "action"}),
                   MixtureSource(c, keys={"obs": "state"})],
                  {"state": {"pad_dims": True, "dtype": "float32"}, "action": {"fill": 0, "pad_dims": True}},
                  delta_timestamps={"action": [0.0, 0.2]}, seed=11)
    path = tmp / "mixture.pkl"
    path.write_bytes(pickle.dumps(mix))
    return path, mix


def _reference(mix) -> list[tuple[int, int, int]]:
    """The epoch's stream as one process without workers reads it."""
    rows = []
    for batch in MixtureLoader(MixtureDataset(mix, 1, rank=0, world_size=1)):
        rows += list(zip(batch["source_index"].tolist(), batch["source_episode"].tolist(),
                         batch["source_frame"].tolist()))
    return rows


def _launch(tmp: Path, mixture: Path, world: int, workers: int, drop_last: bool, resume: Path | None = None,
            step_seconds: float = 0.0) -> list[subprocess.Popen]:
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = {"mixture": str(mixture), "batch_size": BATCH, "num_workers": workers, "drop_last": drop_last,
           "resume": str(resume) if resume else None, "out": str(tmp), "rendezvous": str(tmp / "rendezvous"),
           "step_seconds": step_seconds}
    (tmp / "config.json").write_text(json.dumps(cfg))
    env = dict(os.environ, WORLD_SIZE=str(world), GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(HERE.parent), str(HERE), os.environ.get("PYTHONPATH", "")]))
    return [subprocess.Popen([sys.executable, str(HERE / "mixture_ddp_worker.py"), str(tmp / "config.json")],
                             env={**env, "RANK": str(r)}, start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for r in range(world)]


def _kill(procs) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the rank and its DataLoader workers
        except ProcessLookupError:
            pass
    for p in procs:
        p.wait(timeout=30)


def _join(procs, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            assert p.returncode == 0, out
    except subprocess.TimeoutExpired:
        _kill(procs)
        raise AssertionError(f"the ranks did not finish in {timeout} s") from None


def _stream(batches_by_rank) -> list[tuple[int, int, int]]:
    """Step by step, ranks in order: the global stream the ranks read."""
    rows = []
    for step in range(max(len(b) for b in batches_by_rank)):
        for rank_batches in batches_by_rank:
            if step < len(rank_batches):
                rows += [tuple(r[1:]) for r in rank_batches[step]]
    return rows


def _check_every_window_once(mixture_file, tmp_path, world, workers):
    path, mix = mixture_file
    _join(_launch(tmp_path, path, world, workers, drop_last=False))
    result = json.loads((tmp_path / "result.json").read_text())
    got = _stream(result["batches"])
    want = [(s, e, j) for s, lengths in enumerate(LENGTHS) for e, j in anchors(lengths)]
    assert len(got) == len(want) and sorted(got) == sorted(want)  # every window once, none twice
    assert got == _reference(mix)  # the same global order as one process reads
    positions = [r[0] for rank in result["batches"] for batch in rank for r in batch]
    assert len(set(positions)) == len(positions)
    assert result["state"]["position"] == len(want)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("world", [1, 2])
def test_every_window_once_in_the_same_order_on_one_or_two_ranks(mixture_file, tmp_path, world, workers):
    _check_every_window_once(mixture_file, tmp_path, world, workers)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("world", [3, 4])
def test_every_window_once_in_the_same_order_on_three_or_four_ranks(mixture_file, tmp_path, world, workers):
    _check_every_window_once(mixture_file, tmp_path, world, workers)


@pytest.mark.parametrize("resume_world,resume_workers", [(2, 2), (3, 0)])
def test_a_run_killed_mid_epoch_resumes_from_its_checkpoint_on_any_number_of_ranks(mixture_file, tmp_path,
                                                                                   resume_world, resume_workers):
    path, mix = mixture_file
    first = tmp_path / "first"
    procs = _launch(first, path, 2, 2, drop_last=True, step_seconds=0.4)
    ck = first / "checkpoint.json"
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            if ck.exists() and json.loads(ck.read_text())["step"] >= 2:
                break
            assert all(p.poll() is None for p in procs), "a rank ended before it could be killed"
            time.sleep(0.05)
        else:
            raise AssertionError("no checkpoint within 90 s")
    finally:
        _kill(procs)
    saved = json.loads(ck.read_text())
    k, position = saved["step"], saved["state"]["position"]
    assert position == k * 2 * BATCH
    done = [[json.loads(line) for line in open(first / f"records-{r}.jsonl")][:k] for r in range(2)]
    second = tmp_path / "second"
    _join(_launch(second, path, resume_world, resume_workers, drop_last=True, resume=ck))
    rest = json.loads((second / "result.json").read_text())["batches"]
    ref = _reference(mix)
    g = resume_world * BATCH
    assert _stream(done) == ref[:position]
    assert _stream(rest) == ref[position: position + (len(ref) - position) // g * g]


def test_a_state_of_another_mixture_is_refused_before_any_worker_starts(mixture_file, tmp_path):
    path, mix = mixture_file
    loader = MixtureLoader(MixtureDataset(mix, BATCH, rank=0, world_size=1), num_workers=2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del it
    other = pickle.loads(path.read_bytes())
    other.fingerprint = "0" * 32  # as a mixture of other stores, keys, weights or seed has
    fresh = MixtureLoader(MixtureDataset(other, BATCH, rank=0, world_size=1), num_workers=2)
    with pytest.raises(ValueError, match="another mixture"):
        fresh.load_state_dict(state)
    with pytest.raises(ValueError, match="not a state dict"):
        fresh.load_state_dict({"position": 3})
    with pytest.raises(ValueError, match="another mixture"):
        fresh.dataset.load_state_dict(loader.dataset.state_dict())


def test_statefuldataloader_resumes_each_workers_state(mixture_file):
    pytest.importorskip("torchdata")
    from torchdata.stateful_dataloader import StatefulDataLoader

    _path, mix = mixture_file

    def positions(batches):
        return [b["mixture_position"].tolist() for b in batches]

    full = positions(StatefulDataLoader(MixtureDataset(mix, BATCH, rank=1, world_size=2), batch_size=None,
                                        num_workers=2))
    loader = StatefulDataLoader(MixtureDataset(mix, BATCH, rank=1, world_size=2), batch_size=None, num_workers=2)
    it = iter(loader)
    head = positions([next(it) for _ in range(3)])
    state = loader.state_dict()
    del it
    again = StatefulDataLoader(MixtureDataset(mix, BATCH, rank=1, world_size=2), batch_size=None, num_workers=2)
    again.load_state_dict(state)
    assert head + positions(again) == full
    assert np.concatenate(full).tolist() == [p for j in range(0, len(mix), 2 * BATCH)
                                             for p in range(j + BATCH, min(j + 2 * BATCH, len(mix)))]
