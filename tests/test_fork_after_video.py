"""A forked child works after any video import or read (issue 47 item 1).

PyAV 19 keeps a libswscale context per Python thread, made with one slice thread per core; a child
forked after such a context exists in a pool thread hung for ever (``sws_freeContext`` joining
threads the child does not have), and so did a child decoding with the main thread's.  Each trial
runs in a fresh interpreter, so this test process's own threads and caches play no part, and under
a timeout, so a hang is a failure naming the case, never a stuck suite.  The child's batch is
compared with the parent's (the same store read twice, in two processes).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("av")
pytest.importorskip("pyarrow.parquet")

SCRIPT = textwrap.dedent("""
    import gc, multiprocessing as mp, sys, tempfile
    from pathlib import Path
    import numpy as np
    from replaybuf_core import ReplayBuffer, SequenceSampler
    from replaybuf_core.importing import import_dataset
    from replaybuf_core.testing.lerobot_writer import Camera, Spec, write_dataset

    case = sys.argv[1]
    d = Path(tempfile.mkdtemp())
    # 126 frames: ~16 video chunks, so the sampler decodes them on the codec pool's threads too
    spec = Spec([40, 56, 30], fps=10, cameras={"cam": Camera(120, 160, codec="libx264", gop=2)}, episodes_per_file=2)
    root = write_dataset(d / "ds", spec, "v3.0")
    video = {"passthrough": "passthrough", "reencode": "reencode"}[case.split("-")[0]]
    import_dataset(root, d / "p.zarr", "lerobot", format_options={"video": video},
                   frames="video" if video == "reencode" else "exact", progress=False)
    rb = ReplayBuffer.create_from_path(str(d / "p.zarr"))
    sampler = SequenceSampler(rb, sequence_length=4, keys=["cam"])
    idx = np.arange(len(sampler))
    parent = sampler.sample_batch(idx)["cam"]   # decoded on the codec pool's threads
    gc.collect()

    def child(q):
        try:
            got = sampler.sample_batch(idx)["cam"] if case.endswith("read") else None
            q.put(("ok", None if got is None else bool(np.array_equal(got, parent))))
        except BaseException as exc:
            q.put(("error", repr(exc)))

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    p.join(60)
    if p.exitcode is None:
        p.kill()
        print("child hung"); sys.exit(3)
    status, value = q.get(timeout=5)
    print(status, value, "exit", p.exitcode)
    sys.exit(0 if status == "ok" and value is not False and p.exitcode == 0 else 4)
""")


@pytest.mark.parametrize("case", ["passthrough-exit", "passthrough-read", "reencode-exit", "reencode-read"])
def test_a_forked_child_works_after_a_video_import_and_read(case, tmp_path):
    try:
        run = subprocess.run([sys.executable, "-c", SCRIPT, case], capture_output=True, text=True, timeout=240,
                             cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:  # the parent hung (a child that never exits is killed above)
        pytest.fail(f"{case}: the trial did not finish in 240 s: {exc.stdout!r}")
    assert run.returncode == 0, f"{case}: {run.stdout.strip()[-400:]} {run.stderr.strip()[-1500:]}"
