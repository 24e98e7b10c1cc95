"""The ``replaybuf`` command line.

Core commands live in this package, one module each; backends add theirs through the
``replaybuf_register_commands`` hook (see :mod:`replaybuf_core.hookspecs`).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from replaybuf_core import registry

from . import (
    backends_cmd,
    copy_cmd,
    delete_cmd,
    edit_cmd,
    export_cmd,
    formats_cmd,
    import_cmd,
    info_cmd,
    merge_cmd,
    rechunk_cmd,
    serve_cmd,
    stats_cmd,
    synth_cmd,
    unlock_cmd,
    verify_cmd,
    view_cmd,
)

CORE_COMMANDS = (backends_cmd, copy_cmd, delete_cmd, edit_cmd, export_cmd, formats_cmd, import_cmd, info_cmd, merge_cmd, rechunk_cmd,
                 serve_cmd, stats_cmd, synth_cmd, unlock_cmd, verify_cmd, view_cmd)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser: core commands plus every installed plugin's commands."""
    parser = argparse.ArgumentParser(prog="replaybuf", description="Episodic robot-learning replay buffers.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in CORE_COMMANDS:
        module.register(sub)
    registry.list_backends()  # loads the entry points (and their warnings) once
    registry.get_plugin_manager().hook.replaybuf_register_commands(subparsers=sub)
    return parser


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a cluster's preemption, ``kill``), raised like Ctrl-C so that what a command was
    building beside its output is removed and committed episodes are kept."""


def _terminate_like_ctrl_c() -> Any:
    """Turn SIGTERM into :class:`_Terminated` while the command runs (main thread only); returns the
    previous handler (restored by the caller) or None."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def on_term(signum, frame):
        raise _Terminated()

    return signal.signal(signal.SIGTERM, on_term)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 success, 1 a failed check, 2 bad usage or input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    previous = _terminate_like_ctrl_c()
    try:
        return int(args.func(args) or 0)
    except _Terminated:
        print(f"replaybuf {args.command}: terminated (SIGTERM)", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"replaybuf {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`replaybuf info X | head`): stop quietly, as cat does
        try:  # (and keep Python from complaining again while it flushes stdout at exit)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141
    except KeyError as exc:  # str(KeyError) keeps the quotes: show the message itself
        print(f"replaybuf {args.command}: error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, IndexError, OSError, RuntimeError, ImportError) as exc:
        print(f"replaybuf {args.command}: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
