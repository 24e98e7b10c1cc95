"""``replaybuf serve STORE [--port P] [--writable]``: the browser viewer (:mod:`replaybuf_core.viewer`)."""

from __future__ import annotations

import sys


def register(sub) -> None:
    """Add this command to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("serve", help="browse a store in a web browser: episodes, cameras, plots, statistics, marks",
                       description="Serve a local web page that shows the store: the episode list (filterable, "
                                   "paged), one episode's cameras as scrubbable players with its numeric keys "
                                   "plotted in step, the statistics, and marking episodes into a bool meta "
                                   "array mask.NAME (with --writable). Needs the viewer extra: "
                                   "pip install 'replaybuf[viewer]'.")
    p.add_argument("path", metavar="STORE", help="store to show: a directory or an s3:// / gs:// / az:// URL")
    p.add_argument("--port", type=int, default=None, metavar="P",
                   help="TCP port (default 8765; 0: any free port)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="also answer requests addressed to this host name (repeatable), e.g. the machine's "
                        "name with --host 0.0.0.0; other names are refused (403: a guard against DNS "
                        "rebinding). localhost, IP addresses and --host's name are always accepted")
    p.add_argument("--writable", action="store_true",
                   help="allow saving marks as meta/mask.NAME (each save takes the writer lock); "
                        "without it the viewer never writes")
    p.set_defaults(func=run)


def run(args) -> int:
    """Run the command with parsed ``args``: serves until Ctrl-C; returns the exit code (2: bad
    store, port in use, missing extra)."""
    from replaybuf_core.viewer.app import create_app
    from replaybuf_core.viewer.hosts import allowed_names
    from replaybuf_core.viewer.server import DEFAULT_PORT, bind, serve_forever, url_of

    port = DEFAULT_PORT if args.port is None else args.port
    if not 0 <= port <= 65535:
        raise ValueError(f"--port {port} is not a TCP port (0 to 65535)")
    hosts = allowed_names(args.host, args.allow_host)
    app = create_app(args.path, writable=args.writable, hosts=hosts)
    sock = bind(args.host, port)
    viewer = app.state.viewer
    mode = "writable: marks can be saved" if args.writable else "read-only"
    print(f"replaybuf serve: {args.path} ({viewer.catalog.n_episodes} episodes, {mode}) at {url_of(sock)}  "
          "(Ctrl-C stops)", flush=True)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"replaybuf serve: listening on {args.host}: other machines can read this store", file=sys.stderr)
    serve_forever(app, sock)
    return 0
