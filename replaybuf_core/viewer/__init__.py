"""``replaybuf serve``: a local browser viewer of a store — the episode list, one episode's cameras and
time series, the statistics, and marking episodes into a ``meta/mask.<name>`` array.

One idea per module: :mod:`.catalog` (the episode list: columns, filters, pages), :mod:`.frames`
(one stored frame → PNG / JPEG bytes), :mod:`.series` (an episode's numeric keys as plot data),
:mod:`.marking` (saving a mask under the writer lock), :mod:`.app` (the HTTP routes, Starlette),
:mod:`.server` (binding the port and running uvicorn).  The web framework is the optional extra
``replaybuf[viewer]``; everything else reads through :class:`~replaybuf_core.store.buffer.ReplayBuffer`.
"""
