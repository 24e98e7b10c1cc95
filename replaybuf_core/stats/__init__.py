"""Normalisation statistics as arithmetic: mergeable per-episode summaries (count, mean, std, min,
max, quantiles; :mod:`.summaries`), their compiled loops (:mod:`.kernels`) and the quantile sketch
(:mod:`.quantiles`).  Reads a buffer through ``get_steps_slice``-style duck typing and imports no
store: keeping statistics *in* a store, up to date through edits, is the store's
(:mod:`replaybuf_core.store.stored_stats`)."""
