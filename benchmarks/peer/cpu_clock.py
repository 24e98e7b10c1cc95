"""CPU time of a reading process and its live DataLoader workers, for the peer benchmark's readers.

Both readers — LeRobot's (``lerobot_reader.py``, in LeRobot's venv) and ours (``replaybuf_reader.py``)
— count CPU the same way: user + system time of the process (all its threads, ``os.times``) plus that
of its live child processes (``/proc/<pid>/stat`` utime + stime, proc(5) fields 14 and 15), read
right before and right after the timed batches on one iterator, so the workers are alive at both
reads.  ``RUSAGE_CHILDREN`` is not used: it counts only reaped children, i.e. a worker's whole life
including start-up and warm-up.  Standard library only (the LeRobot venv has no replaybuf).
"""

from __future__ import annotations

import os
from pathlib import Path

CPU_METHOD = "os.times of self + /proc/<pid>/stat utime+stime of live workers, around the timed batches"


def _cpu_ticks(pid: int) -> tuple[int, int] | None:
    """(utime, stime) of ``pid`` in clock ticks, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state is field 3
    return int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)


def _children() -> list[int]:
    me = os.getpid()
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == me:
                out.append(int(entry.name))
    return out


def cpu_snapshot() -> dict[str, object]:
    """User and system seconds of this process and, per pid, of its live child processes."""
    t = os.times()
    return {"self": (t.user, t.system), "children": {p: c for p in _children() if (c := _cpu_ticks(p))}}


def cpu_between(a: dict, b: dict) -> tuple[float, float]:
    """(user, system) seconds spent between two snapshots by this process and the children alive at
    both (a child that appeared or ended in between is counted from its first / to its last read)."""
    tick = os.sysconf("SC_CLK_TCK")
    user = b["self"][0] - a["self"][0]
    system = b["self"][1] - a["self"][1]
    for pid, (u1, s1) in b["children"].items():
        u0, s0 = a["children"].get(pid, (0, 0))
        user += (u1 - u0) / tick
        system += (s1 - s0) / tick
    return user, system


def timed_batches(loader, warmup: int, batches: int, workers: int, count_key: str, who: str) -> tuple[dict, dict]:
    """Read ``loader`` as both readers do: the first batch (timed from ``iter(loader)``: worker start
    included), ``warmup - 1`` more, then ``batches`` timed ones between two CPU snapshots.  Returns
    ``(first, the measurement fields of the JSON)``, ``first`` being the first batch's ``{key:
    namespace(shape, dtype)}``; ``count_key``: a key whose length is a batch's samples.  SystemExit
    (naming ``who``) when fewer than ``workers`` workers were alive."""
    import time
    from types import SimpleNamespace

    t = time.perf_counter()
    it = iter(loader)
    batch = next(it)
    first_batch_s = time.perf_counter() - t
    # only the shapes and dtypes are kept: a training loop does not hold its first batch for the
    # whole run, and a held batch would keep one of a reader's reusable outputs taken throughout
    first = {k: SimpleNamespace(shape=tuple(v.shape), dtype=v.dtype) for k, v in batch.items() if hasattr(v, "shape")}
    del batch
    for _ in range(warmup - 1):
        next(it)
    samples = 0
    load_before = os.getloadavg()[0]
    a = cpu_snapshot()
    t = time.perf_counter()
    for _ in range(batches):
        samples += len(next(it)[count_key])
    wall = time.perf_counter() - t
    b = cpu_snapshot()
    if workers and len(b["children"]) < workers:
        raise SystemExit(f"{who}: found {len(b['children'])} live workers, expected {workers}")
    del it
    user, system = cpu_between(a, b)
    return first, {
        "samples": samples, "wall_s": wall, "cpu_user_s": user, "cpu_sys_s": system,
        "cpu_ms_per_sample": 1e3 * (user + system) / samples, "cpu_user_ms_per_sample": 1e3 * user / samples,
        "cpu_sys_ms_per_sample": 1e3 * system / samples, "samples_per_s": samples / wall,
        "first_batch_s": first_batch_s, "loadavg_1min": [load_before, os.getloadavg()[0]], "cpu_method": CPU_METHOD,
    }
