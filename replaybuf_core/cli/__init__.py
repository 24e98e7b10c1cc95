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
import warnings
from collections.abc import Sequence
from typing import Any

#: The core commands: modules of this package, each with ``register(sub)`` and ``run(args)``.  They are
#: imported when the parser is built, inside :func:`main` — so a Ctrl-C at any instant after the start
#: (while NumPy, zarr or the backends load) ends in one line and exit 130, not a traceback.
CORE_COMMANDS = ("backends_cmd", "copy_cmd", "delete_cmd", "diff_cmd", "edit_cmd", "export_cmd", "formats_cmd",
                 "gc_cmd", "import_cmd", "info_cmd", "log_cmd", "merge_cmd", "mixture_cmd", "rechunk_cmd", "restore_cmd",
                 "serve_cmd", "stats_cmd", "synth_cmd", "tag_cmd", "unlock_cmd", "verify_cmd", "view_cmd")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser: core commands plus every installed plugin's commands."""
    import importlib

    from replaybuf_core import registry

    parser = argparse.ArgumentParser(prog="replaybuf", description="Episodic robot-learning replay buffers.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in CORE_COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
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


def _handled_interrupt() -> None:
    """Tell the interpreter that the ``KeyboardInterrupt`` was handled.  CPython marks an interrupt as
    unhandled when it leaves code run by ``exec`` of a string (dataclasses and namedtuples make their
    methods so while NumPy, zarr... load), even when it is caught further up; at exit the interpreter
    then kills itself with SIGINT (exit status -2) instead of returning our 130.  The next ``exec`` of
    a string clears the mark.  Also quiet: zarr's IO loop may hold a read the interrupt abandoned, which
    asyncio would report ("Task was destroyed but it is pending") as the interpreter exits, and the
    interrupt may have come between zarr making a coroutine and handing it to its loop ("coroutine ...
    was never awaited", once the exception's frames are freed)."""
    exec("")
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)


def _redeliver_lost_interrupts() -> Any:
    """While the command runs, a Ctrl-C (or SIGTERM) that lands where Python cannot raise it — a
    callback of the import machinery's module locks, a weakref callback, a ``__del__`` — is not
    printed as "Exception ignored ... KeyboardInterrupt" with a traceback and lost: it is raised again
    in the main thread, so the command still ends with one line and 130 (143).

    ``_thread.interrupt_main`` called inside the hook would raise at once, inside the hook (and be
    lost again); so a short-lived thread calls it once the hook has returned.  Returns the previous
    ``sys.unraisablehook`` (restored by the caller)."""
    import _thread
    import time

    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        exc = unraisable.exc_value
        if not isinstance(exc, KeyboardInterrupt):
            previous(unraisable)
            return
        signum = signal.SIGTERM if isinstance(exc, _Terminated) else signal.SIGINT
        returned = [False]

        def redeliver() -> None:
            while not returned[0]:  # the hook's last statement sets it; nothing after it can raise
                time.sleep(0.001)
            _thread.interrupt_main(signum)

        threading.Thread(target=redeliver, name="replaybuf-interrupt", daemon=True).start()
        returned[0] = True  # (a store, not a call: the interpreter does not check for signals here)

    sys.unraisablehook = hook
    return previous


def _bound_the_exit(code: int) -> None:
    """After an interrupt, end the process with ``code`` if the interpreter's exit has not within
    ``REPLAYBUF_EXIT_BOUND_SECONDS`` (default 30).  The exit joins the thread pools' workers, and a
    worker stuck for good — waiting on a lock the interrupted main thread never released (a Ctrl-C
    landing between a ``Condition``'s acquire and its ``with`` block) — kept a command that had said
    "interrupted" alive for ever, deaf to Ctrl-C (ignored from then on).  What the command built
    beside its output is removed before this; what an exit hook would still have done is what a
    killed process leaves, which the next run takes over (the writer lock is the kernel's flock, a
    lease lapses)."""
    import time

    try:
        seconds = float(os.environ.get("REPLAYBUF_EXIT_BOUND_SECONDS", "30"))
    except ValueError:
        seconds = 30.0

    def bound() -> None:
        time.sleep(seconds)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed pipe: nothing more to say
                pass
        os._exit(code)

    threading.Thread(target=bound, name="replaybuf-exit-bound", daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 success, 1 a failed check, 2 bad usage or input, 130
    interrupted by Ctrl-C, 143 terminated by SIGTERM).

    Everything after the first line — loading the commands and the backends, parsing ``argv``, the
    command — runs under the handlers: an interrupt at any instant prints one line and returns 130.
    Run as the program (``argv`` None: ``replaybuf``, ``python -m replaybuf_core.cli``), the outcome
    is decided once the command has returned: a Ctrl-C or SIGTERM while the interpreter then exits
    (joining the codec pool's threads) is ignored — it printed a traceback from an exit hook, or
    killed a finished copy with status -2."""
    program = argv is None
    interrupted = 0  # the exit status of an interrupt (130, 143)
    previous = _terminate_like_ctrl_c()  # first: from here on SIGTERM is an interrupt too
    unraisable = _redeliver_lost_interrupts()
    name = "replaybuf"  # "replaybuf COMMAND" once the command is known
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command:
            name = f"replaybuf {args.command}"
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                            format="%(levelname)s %(name)s: %(message)s")
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return int(args.func(args) or 0)
    except _Terminated:
        _handled_interrupt()
        print(f"{name}: terminated (SIGTERM)", file=sys.stderr)
        interrupted = 143
        return 143
    except KeyboardInterrupt:
        _handled_interrupt()
        print(f"{name}: interrupted", file=sys.stderr)
        interrupted = 130
        return 130
    except BrokenPipeError:  # the reader went away (`replaybuf info X | head`): stop quietly, as cat does
        try:  # (and keep Python from complaining again while it flushes stdout at exit)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141
    except KeyError as exc:  # str(KeyError) keeps the quotes: show the message itself
        print(f"{name}: error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, IndexError, OSError, RuntimeError, ImportError) as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    finally:
        sys.unraisablehook = unraisable
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if program and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            exec("")  # (an interrupt some library caught inside an exec'd string: see _handled_interrupt)
            if interrupted:
                _bound_the_exit(interrupted)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
