"""The built-in import formats (``replaybuf import FORMAT SRC DST``): ``diffusion-policy`` and
``lerobot``.  Each is a :class:`~replaybuf_core.source.FormatEntrypoint` registered through
the ``replaybuf_formats`` hook (:mod:`.plugin`), exactly like a third-party format."""
