"""One rank of a mixture training run, launched as torchrun would (``RANK``, ``WORLD_SIZE`` in the
environment; a file rendezvous), for tests/test_mixture_distributed.py.

``python mixture_ddp_worker.py CONFIG.json``; the config names the pickled mixture, the batch size,
workers, ``drop_last``, an optional checkpoint to resume from, and the output directory.  Each step
the rank appends the ``(position, source, episode, frame)`` of its batch to ``records-<rank>.jsonl``,
then all ranks all-reduce a tensor over gloo (a gradient step's collective), then rank 0 writes the
loader's state to ``checkpoint.json`` (atomically: written beside, renamed).  At the end the ranks'
records are gathered over gloo and rank 0 writes ``result.json``.
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
import sys
import time


def main(config_path: str) -> int:
    import torch
    import torch.distributed as dist

    from replaybuf_core.torch import MixtureDataset, MixtureLoader

    cfg = json.load(open(config_path))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=f"file://{cfg['rendezvous']}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    with open(cfg["mixture"], "rb") as f:
        mixture = pickle.load(f)
    ds = MixtureDataset(mixture, cfg["batch_size"], drop_last=cfg["drop_last"])  # rank, world from the group
    assert (ds.rank, ds.world_size) == (rank, world)
    loader = MixtureLoader(ds, num_workers=cfg["num_workers"])
    if cfg.get("resume"):
        with open(cfg["resume"]) as f:
            loader.load_state_dict(json.load(f)["state"])
    out = cfg["out"]
    mine = []
    with open(os.path.join(out, f"records-{rank}.jsonl"), "a") as rec:
        for step, batch in enumerate(loader):
            rows = [[int(p), int(s), int(e), int(t)] for p, s, e, t in zip(
                batch["mixture_position"], batch["source_index"], batch["source_episode"], batch["source_frame"])]
            mine.append(rows)
            rec.write(json.dumps(rows) + "\n")
            rec.flush()
            if cfg["drop_last"]:  # every rank has the same number of steps: a gradient step's all-reduce
                t = torch.ones(1)
                dist.all_reduce(t)
                assert int(t.item()) == world
                if rank == 0:
                    tmp = os.path.join(out, "checkpoint.json.tmp")
                    with open(tmp, "w") as f:
                        json.dump({"step": step + 1, "state": loader.state_dict()}, f)
                        f.flush()
                        os.fsync(f.fileno())
                    os.replace(tmp, os.path.join(out, "checkpoint.json"))
            time.sleep(cfg.get("step_seconds", 0))
    gathered = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        with open(os.path.join(out, "result.json"), "w") as f:
            json.dump({"batches": gathered, "state": loader.state_dict()}, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
