"""The store and its verbs: :class:`~.buffer.ReplayBuffer` (episode bookkeeping over any backend) with
its reading, copying, editing, merging and rechunking verbs (mixins, one module each), the buffered
:class:`~.writer.EpisodeWriter`, the commit (:mod:`.commit`) and what undoes an interrupted one
(:mod:`.recovery`, :mod:`.recovered_view`), crash-safe in-place edits (:mod:`.editing`), replacing a
store beside itself (:mod:`.replace`), streaming array copies (:mod:`.copying`), stored statistics
(:mod:`.stored_stats`), the step → episode index (:mod:`.episode_index`) and schema-driven creation
(:mod:`.creation`).  One idea: what it takes to keep ``data/*`` and ``meta/episode_ends`` true."""
