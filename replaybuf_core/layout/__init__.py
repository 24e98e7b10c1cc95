"""The layout vocabulary every floor shares: what may be a key (:mod:`.keys`), dataset schemas
(:mod:`.schema`), chunk math (:mod:`.chunks`), shard shapes of camera frames (:mod:`.sharding`),
compressor presets (:mod:`.compressors`), which keys are camera frames (:mod:`.frames`) and codec names
for people (:mod:`.codec_names`).  Pure functions of shapes, dtypes and names: no store, no I/O; the
backends may import it (docs/architecture.md)."""
