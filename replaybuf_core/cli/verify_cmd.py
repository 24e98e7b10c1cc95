"""``replaybuf verify PATH``: name every problem of a store; exit 0 clean, 1 otherwise."""

from __future__ import annotations


def register(sub) -> None:
    """Add this command to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("verify", help="check a replay buffer's integrity (read-only)",
                       description="Check episode_ends, array lengths, that every chunk decodes (and, on "
                                   "zarr, that no chunk/shard file is missing); NaN/inf are notes.  Exit 0 "
                                   "when clean, 1 when an error was found.")
    p.add_argument("path", metavar="PATH", help="store to check (opened read-only)")
    p.add_argument("--repair", action="store_true",
                   help="first undo interrupted writes (open writable, take the writer lock; see "
                        "replaybuf_core.store.recovery) and say what was done, then verify")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    """Run the command with parsed ``args``; returns the exit code (0 ok, 1 failed check, 2 bad input)."""
    from replaybuf_core.inspection.verify import verify_store

    if getattr(args, "repair", False):
        from replaybuf_core.store.recovery import repair

        report = repair(args.path)
        for line in report.messages() or ["repair: nothing to do"]:
            print(f"REPAIRED: {line}" if not report.clean else line)
    problems = verify_store(args.path, progress=not getattr(args, "no_progress", False))
    errors = [p for p in problems if p.level == "error"]
    for p in problems:
        print(p)
    notes = len(problems) - len(errors)
    print(f"{args.path}: " + (f"FAILED: {len(errors)} error(s), {notes} note(s)" if errors
                              else f"OK ({notes} note(s))"))
    return 1 if errors else 0
