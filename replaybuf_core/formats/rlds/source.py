"""An RLDS dataset (a TFDS prepared directory of TFRecord shards) as an import
:class:`~replaybuf_core.source.Source`, read without TensorFlow.

Layout (TFDS): ``dataset_info.json`` (splits, their shards' episode counts and file-name template),
``features.json`` (:mod:`.features`) and ``<name>-<split>.tfrecord-NNNNN-of-MMMMM`` shards (plain or
gzip-compressed), each record one episode as a ``tf.train.Example`` (:mod:`.example`) whose
``steps/...`` features hold the steps' values back to back.

Keys: every per-step feature, named by its path under ``steps`` with ``.`` for ``/``
(``observation.image``, ``action``, ``is_first``, ``language_instruction``): tensors in their declared
dtype and shape, images decoded (PNG exactly; JPEG by libjpeg-turbo, ``imagecodecs.jpeg8_decode``),
text as ``str``.  Episode-level features (``episode_metadata/...``) go to each episode's attributes;
the ``language_instruction*`` texts to the episode's ``tasks`` and the dataset's ``tasks``, as a
LeRobot import keeps them.

Opening reads every record once (:func:`.tfrecord.iter_records`: both CRCs) and counts each feature's
values without decoding them (:func:`.example.scan_counts`), so every problem is found before anything
is written: a truncated shard, a CRC mismatch, a shard listed in ``dataset_info.json`` but absent, a
record that is not an Example, a feature missing or with step counts that disagree.  Each makes its
episode(s) unavailable, named with the file and record; the import refuses them, or with
``skip_bad_episodes`` leaves them out and reports them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import threading
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from replaybuf_core.layout import image_bytes
from replaybuf_core.layout.frame_choice import FrameChoice
from replaybuf_core.source import KeySpec, Source

from .example import ScanError, feature_values, messages, parse_example, scan_counts
from . import index as shard_index
from .features import Leaf, parse_features
from .index import EpisodeEntry
from .tfrecord import Record, RecordError, RecordReader, iter_records

#: The step-count feature RLDS always has (else the first per-step feature counts).
FIRST = "steps/is_first"
#: Per-step text features that are task descriptions (RLDS / Open X-Embodiment names).
LANGUAGE_PREFIX = "language_instruction"
JPEG_MODES = ("passthrough", "reencode")
#: Shards indexed at once (threads: the reading waits on the disk, the CRCs release the GIL).
INDEX_THREADS = 4
#: What a JPEG camera's imported pixels are.
JPEG_NOTE = ("JPEG in the source (lossy when recorded): what is imported is its decode by libjpeg-turbo with the "
             "accurate integer IDCT (imagecodecs.jpeg8_decode; the same as PIL's and as tf.io.decode_jpeg with "
             "dct_method='INTEGER_ACCURATE'; TFDS's own decode uses the fast IDCT and differs by a few levels)")


def find_root(path: str | os.PathLike) -> Path:
    """The TFDS prepared directory at or under ``path``: ``path`` itself when it holds
    ``dataset_info.json``, else its one subdirectory that does (``<data_dir>/<name>/<version>``: the
    highest version when there are several).  Raises FileNotFoundError."""
    root = Path(os.path.expanduser(os.fspath(path)))
    if (root / "dataset_info.json").is_file():
        return root
    if root.is_dir():
        found = sorted((p for p in root.iterdir() if (p / "dataset_info.json").is_file()), key=_version_key)
        if found:
            return found[-1]
    raise FileNotFoundError(f"{root}: no dataset_info.json (a TFDS prepared directory <name>/<version>/ holds it)")


def _version_key(p: Path) -> tuple:
    return tuple(int(x) if x.isdigit() else -1 for x in p.name.split(".")), p.name


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file (a TFDS prepared directory holds dataset_info.json and "
                                "features.json)") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None


def shard_files(root: Path, info: dict, split: dict) -> list[tuple[Path, int]]:
    """``(path, episodes)`` of each shard of ``split`` (an entry of ``dataset_info.json``'s ``splits``),
    from its ``shardLengths`` and ``filepathTemplate`` (TFDS's default template when absent)."""
    lengths = [int(n) for n in split.get("shardLengths") or []]
    template = split.get("filepathTemplate") or "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
    fmt = info.get("fileFormat") or "tfrecord"
    out = []
    for i, n in enumerate(lengths):
        name = (template.replace("{DATASET}", str(info.get("name", ""))).replace("{SPLIT}", str(split["name"]))
                .replace("{FILEFORMAT}", fmt).replace("{SHARD_X_OF_Y}", f"{i:05d}-of-{len(lengths):05d}")
                .replace("{SHARD_INDEX}", f"{i:05d}").replace("{NUM_SHARDS}", f"{len(lengths):05d}"))
        out.append((root / name, n))
    return out


def key_name(leaf: Leaf) -> str:
    """The store key of a per-step feature: its path under ``steps``, ``.`` for ``/``."""
    return leaf.path.split("/", 1)[1].replace("/", ".")


class RldsSource(Source):
    """An RLDS / TFDS dataset (see the module docstring).

    Args:
        path: the TFDS prepared directory (``<data_dir>/<name>/<version>``, holding
            ``dataset_info.json``), or a directory holding one (the highest version).
        split: the split to import (default ``train``, or the only split).
        skip_bad_episodes: leave out episodes that cannot be read (truncated shard, CRC mismatch,
            absent shard, disagreeing step counts...) and report them, instead of refusing the import.
        jpeg: ``"passthrough"`` (the default): a JPEG camera stored with a JPEG ``frames=`` codec
            (``fast``, ``jpeg:Q``) keeps the source's JPEG bytes, bit-exact to their decode;
            ``"reencode"``: every camera is decoded and encoded again.
        progress: a progress bar over the shards while indexing them (datasets of 8 shards or more).
        index_cache: where each shard's index is kept once read (:mod:`.index`): None for
            :func:`.index.cache_dir`, a directory, or False for none.  A Dask import's workers and an
            import started again find the shards indexed instead of reading them again.

    Raises:
        FileNotFoundError: no ``dataset_info.json`` / ``features.json``.
        ValueError: a file format other than ``tfrecord``, an unknown split (the message lists them),
            a split with no shards; :class:`.features.UnsupportedFeature` naming a feature path and type;
            an unknown ``jpeg``.
        ImportError: protobuf missing (``pip install 'replaybuf[rlds]'``).
    """

    format_name = "rlds"

    def __init__(self, path: str | os.PathLike, *, split: str | None = None, skip_bad_episodes: bool = False,
                 jpeg: str = "passthrough", progress: bool = True, index_cache: str | os.PathLike | bool | None = None):
        if jpeg not in JPEG_MODES:
            raise ValueError(f"jpeg must be one of {JPEG_MODES}, got {jpeg!r}")
        root = find_root(path)
        super().__init__(root)
        self._feature_cls = messages()[1]
        self.info = info = _read_json(root / "dataset_info.json")
        fdoc = _read_json(root / "features.json")
        self._features_digest = hashlib.sha1(json.dumps(fdoc, sort_keys=True).encode(), usedforsecurity=False).hexdigest()
        self._cache = (None if index_cache is False else
                       shard_index.cache_dir() if index_cache in (None, True) else Path(os.fspath(index_cache)))
        fmt = info.get("fileFormat") or "tfrecord"
        if fmt != "tfrecord":
            raise ValueError(f"{root / 'dataset_info.json'}: fileFormat {fmt!r}; the RLDS reader reads tfrecord shards")
        splits = {s.get("name"): s for s in info.get("splits") or []}
        if split is None:
            split = "train" if "train" in splits or len(splits) != 1 else next(iter(splits))
        if split not in splits:
            raise ValueError(f"{root}: no split {split!r}; its splits are {sorted(splits)} (choose one with split=, "
                             "CLI --split)")
        self.split = split
        self.leaves = parse_features(fdoc)
        self._steps = [leaf for leaf in self.leaves if leaf.per_step]
        self._episode_leaves = [leaf for leaf in self.leaves if not leaf.per_step]
        self._by_key: dict[str, Leaf] = {}
        for leaf in self._steps:
            k = key_name(leaf)
            if k in self._by_key:
                raise ValueError(f"features.json: {leaf.path} and {self._by_key[k].path} both become key {k!r}")
            self._by_key[k] = leaf
        self._step_pos = {leaf.path: i for i, leaf in enumerate(self._steps)}
        self._count_leaf = next((leaf for leaf in self._steps if leaf.path == FIRST), self._steps[0])
        self._language = [leaf for leaf in self._steps if leaf.kind == "text"
                          and leaf.path.rsplit("/", 1)[-1].startswith(LANGUAGE_PREFIX)]
        self.shards = shard_files(root, info, splits[split])
        if not self.shards:
            raise ValueError(f"{root / 'dataset_info.json'}: split {split!r} lists no shards (shardLengths)")
        self._episodes: list[EpisodeEntry] = []
        self._frame_bytes: dict[str, np.ndarray] = {}
        cams = [k for k, leaf in self._by_key.items() if leaf.kind == "image"]
        self._cam_bytes: dict[str, list[int]] = {k: [] for k in cams}
        self._index(progress)
        self.episode_lengths = np.array([ep.steps for ep in self._episodes], dtype=np.int64)
        self.unavailable = {i: ep.problem for i, ep in enumerate(self._episodes) if ep.problem}
        self.skip_unavailable = bool(skip_bad_episodes)
        self.unavailable_hint = ("Pass skip_bad_episodes=True (CLI: --skip-bad-episodes) to import the others and "
                                 "report what was left out")
        # each thread its own open shard (a Dask worker runs several tasks on one source at once, and
        # a RecordReader is not thread-safe: two threads on different shards closed each other's file)
        self._local = threading.local()
        self._open: set[RecordReader] = set()  # every thread's, for close()
        self._open_lock = threading.Lock()
        self._reencode = jpeg == "reencode"
        self._passthrough: set[str] = set()
        # a Dask worker's source is never told the frame choices: there every JPEG camera's bytes are
        # offered to the JPEG codec (claimed only by a JPEG camera's write, in the same task)
        self._choices_unknown = True
        self._build_keys()
        tasks = list(dict.fromkeys(t for ep in self._episodes for t in ep.tasks))
        self.attrs = {"name": info.get("name"), "version": info.get("version"), "split": split,
                      "description": info.get("description"), "tasks": {str(i): t for i, t in enumerate(tasks)},
                      "dataset_info": info, "features": fdoc}
        self.notes.append(f"split {split!r} ({len(self._episodes)} episodes; the dataset's splits: "
                          f"{', '.join(sorted(map(str, splits)))})")
        f64 = [key_name(leaf) for leaf in self._steps if leaf.dtype == np.float64 and leaf.list_kind == "float_list"]
        if f64:
            self.notes.append(f"{', '.join(f64)}: float64 in features.json, but a tf.train.Example holds float32: the "
                              "values are the stored float32 ones as float64, as TFDS reads them")

    # ------------------------------------------------------------------------------------ the index
    def _index(self, progress: bool) -> None:
        """Index every shard (:data:`INDEX_THREADS` at a time: reading a shard waits on the disk), in
        order."""
        from concurrent.futures import ThreadPoolExecutor

        bar = None
        if progress and len(self.shards) >= 8:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(self.shards), unit="shard", desc=f"indexing {self.info.get('name')} {self.split}")
        try:
            with ThreadPoolExecutor(min(INDEX_THREADS, len(self.shards))) as pool:
                # a window of shards ahead, not all of them: the index of a shard is small, its reading is not
                jobs = iter(enumerate(self.shards))
                pending = [pool.submit(self._index_shard, s, path, listed)
                           for s, (path, listed) in itertools.islice(jobs, 2 * INDEX_THREADS)]
                while pending:
                    entries, notes = pending.pop(0).result()
                    for s, (path, listed) in itertools.islice(jobs, 1):
                        pending.append(pool.submit(self._index_shard, s, path, listed))
                    for ep in entries:
                        self._add(ep)
                    self.notes.extend(notes)
                    if bar is not None:
                        bar.update(1)
        finally:
            if bar is not None:
                bar.close()

    def _index_shard(self, s: int, path: Path, listed: int) -> tuple[list[EpisodeEntry], list[str]]:
        """``(entries, notes)`` of shard ``s``: from the cache, else read (and then cached)."""
        entries = shard_index.load(self._cache, path, s, self._features_digest)
        notes: list[str] = []
        if entries is None:
            entries, notes = self._read_shard(s, path, listed)
            if path.is_file():
                shard_index.save(self._cache, path, entries, self._features_digest)
        for ep in entries:  # the spans as one int64 array an episode (memory: 95 k DROID episodes)
            ep.spans = np.array([ep.spans.get(leaf.path, (-1, -1)) for leaf in self._steps], np.int64).reshape(-1, 2)
        return entries, notes

    def _read_shard(self, s: int, path: Path, listed: int) -> tuple[list[EpisodeEntry], list[str]]:
        if not path.is_file():
            problem = f"{path}: the shard is listed in dataset_info.json but absent"
            return [EpisodeEntry(s, n, problem=problem) for n in range(listed)], []
        entries: list[EpisodeEntry] = []
        try:
            for rec, data in iter_records(path):
                ep = EpisodeEntry(s, len(entries), rec.offset, rec.length)
                try:
                    self._scan(ep, data, f"{path}: record {ep.number}")
                except ValueError as exc:
                    ep.problem = str(exc)
                entries.append(ep)
        except RecordError as exc:
            entries.append(EpisodeEntry(s, exc.record, problem=str(exc)))
            for m in range(exc.record + 1, listed):  # the records after a damaged one cannot be found
                entries.append(EpisodeEntry(s, m, problem=f"{path}: record {m}: unreadable after record "
                                                          f"{exc.record} ({exc.what})"))
        n = len(entries)
        notes = [f"{path.name}: {n} records, but dataset_info.json lists {listed} for it"] if n != listed else []
        return entries, notes

    def _add(self, ep: EpisodeEntry) -> None:
        self._episodes.append(ep)
        for k in self._cam_bytes:
            self._cam_bytes[k].append(ep.cam_bytes.get(k, 0))

    def _scan(self, ep: EpisodeEntry, data: bytes, where: str) -> None:
        """Fill ``ep`` from one record: its step count checked against every per-step feature, its
        episode-level values and tasks.  Raises ValueError naming the feature."""
        try:
            counts = scan_counts(data)
        except ScanError as exc:
            raise ValueError(f"{where}: not a tf.train.Example ({exc})") from None
        lead = self._count_leaf
        if lead.path not in counts:
            raise ValueError(f"{where}: the Example has no feature {lead.path} (its features: "
                             f"{sorted(counts)[:20]})")
        kind, count = counts[lead.path][:2]
        steps, rest = divmod(count, lead.values_per_step)
        if rest:
            raise ValueError(f"{where}: {lead.path} holds {count} values, not a whole number of steps of shape "
                             f"{lead.shape}")
        ep.steps = steps
        for leaf in self._steps:
            got = counts.get(leaf.path)
            if got is None:
                if leaf.optional:
                    continue
                raise ValueError(f"{where}: the Example lacks feature {leaf.path} (features.json declares it)")
            kind, count = got[:2]
            if count and kind != leaf.list_kind:
                raise ValueError(f"{where}: {leaf.path} is a {kind}, features.json's {leaf.tfds_class or leaf.kind} "
                                 f"of {leaf.dtype} is stored as a {leaf.list_kind}")
            if count != steps * leaf.values_per_step:
                raise ValueError(f"{where}: step counts disagree: {lead.path} has {steps} steps, {leaf.path} holds "
                                 f"{count} values ({count / leaf.values_per_step:g} steps of shape {leaf.shape})")
            if leaf.kind == "image":
                ep.cam_bytes[key_name(leaf)] = got[3] - got[2]
            if got[2] >= 0:
                ep.spans[leaf.path] = (ep.offset + got[2], got[3] - got[2])
        for leaf in self._episode_leaves:
            got = counts.get(leaf.path)
            if got is None:
                if leaf.optional:
                    continue
                raise ValueError(f"{where}: the Example lacks feature {leaf.path} (features.json declares it)")
            if got[1] != leaf.values_per_step:
                raise ValueError(f"{where}: {leaf.path} holds {got[1]} values, its shape {leaf.shape} takes "
                                 f"{leaf.values_per_step}")
            value = self._decode(leaf, self._feature(data, got, leaf, where), 0, where)
            ep.values[leaf.path] = _jsonable(value)
        for leaf in self._language:
            got = counts.get(leaf.path)
            if got is not None and steps:
                texts = self._decode(leaf, self._feature(data, got, leaf, where), steps, where)
                ep.tasks.extend(t for t in dict.fromkeys(texts) if t and t not in ep.tasks)

    def _feature(self, data: bytes, got: tuple, leaf: Leaf, where: str) -> Any:
        """The values of one feature, parsed from its own bytes (``got``: the scan's kind, count, start,
        stop) by protobuf."""
        try:
            if got[2] < 0:  # a Feature spread over its map entry (merged by protobuf): the whole Example
                f = parse_example(data, where).features.feature[leaf.path]
            else:
                f = self._feature_cls.FromString(data[got[2]:got[3]])
        except Exception as exc:
            raise ValueError(f"{where}: {leaf.path}: not a tf.train.Feature ({type(exc).__name__}: {exc})") from None
        return feature_values(f)[1]

    # ------------------------------------------------------------------------------------ keys
    def _build_keys(self) -> None:
        good = next((i for i, ep in enumerate(self._episodes) if not ep.problem and ep.steps), None)
        for k, leaf in self._by_key.items():
            attrs = {"feature": leaf.path, "tfds_class": leaf.tfds_class, "description": leaf.description}
            if leaf.kind == "text":
                self.keys[k] = KeySpec(object, (), "strings", attrs)
            elif leaf.kind == "image":
                shape = leaf.shape
                if min(shape) < 0:
                    if good is None:
                        raise ValueError(f"{self.path}: {leaf.path}: an Image of unknown size {shape} and no episode "
                                         "to read it from")
                    shape = self.read_rows(good, [k], 0, 1)[k].shape[1:]
                kind = "frames" if leaf.dtype == np.uint8 else "depth"
                self.keys[k] = KeySpec(leaf.dtype, shape, kind, {**attrs, "encoding_format": leaf.encoding})
                if leaf.encoding == "jpeg":
                    self.note_key(k, JPEG_NOTE)
            else:
                self.keys[k] = KeySpec(leaf.dtype, leaf.shape, "numbers", attrs)

    def frame_choices(self, choices: dict[str, Any]) -> dict[str, Any]:
        """``choices`` with each JPEG camera whose choice is a JPEG codec stored as the source's own JPEG
        bytes (a pass-through ``FrameChoice``), unless ``jpeg="reencode"``."""
        out = dict(choices)
        self._choices_unknown = False
        for k, choice in choices.items():
            leaf = self._by_key.get(k)
            if leaf is None or leaf.encoding != "jpeg":
                continue
            if self._reencode:
                self.frame_handling[k] = "re-encoded with the frames= codec (jpeg='reencode')"
            elif choice.codec == "jpeg" and not choice.passthrough:
                out[k] = FrameChoice("jpeg", choice.quality, subsampling=choice.subsampling, passthrough=True)
                self._passthrough.add(k)
                self.frame_handling[k] = ("passed through: the source's JPEG bytes, bit-exact to their decode "
                                          f"(frames appended later: {choice})")
            else:
                self.frame_handling[k] = (f"decoded and stored with {choice} (a JPEG frames= codec, e.g. fast, "
                                          "keeps the source's JPEG bytes instead)")
        return out

    def decline_frame_choice(self, key: str, reason: str) -> None:
        """Camera ``key`` is not passed through any more (its stored bytes failed the import's check)."""
        self._passthrough.discard(key)
        super().decline_frame_choice(key, reason)

    # ------------------------------------------------------------------------------------ reading
    def _record(self, index: int) -> tuple[bytes, str]:
        if not 0 <= index < len(self._episodes):
            raise IndexError(f"episode {index} out of range: {self.path} ({self.split}) has {len(self._episodes)}")
        ep = self._episodes[index]
        path = self.shards[ep.shard][0]
        where = f"{path}: record {ep.number} (episode {index})"
        if ep.problem:
            raise ValueError(f"episode {index}: {ep.problem}")
        return self._reader(ep.shard).read(ep.number, Record(ep.offset, ep.length)), where

    def _reader(self, shard: int) -> RecordReader:
        """This thread's reader of ``shard`` (one open shard a thread: memory flat in the shards)."""
        mine = getattr(self._local, "readers", None)
        if mine is None:
            mine = self._local.readers = {}
        reader = mine.get(shard)
        if reader is None:
            for old in list(mine):
                gone = mine.pop(old)
                gone.close()
                with self._open_lock:
                    self._open.discard(gone)
            reader = mine[shard] = RecordReader(self.shards[shard][0])
            with self._open_lock:
                self._open.add(reader)
        return reader

    def read_episode(self, index: int, keys: list[str] | None = None) -> dict[str, np.ndarray]:
        """Episode ``index``: key → ``(T,) + shape`` (see the module docstring).

        Raises IndexError; ValueError naming the file, record and feature (a CRC mismatch, an image that
        does not decode or has another size, text that is not UTF-8)."""
        keys = list(self.keys) if keys is None else list(keys)
        data, where = self._record(index)
        counts = scan_counts(data)
        steps = int(self.episode_lengths[index])
        out = {}
        for k in keys:
            leaf = self._by_key[k]
            got = counts.get(leaf.path)
            if got is None:  # an optional feature absent: TFDS's default value
                out[k] = _default(leaf, self.keys[k], steps)
                self.note_key(k, "optional and absent from some episodes: TFDS's default value there")
                continue
            values = self._feature(data, got, leaf, where)
            out[k] = self._decode(leaf, values, steps, where, key=k)
        return out

    def read_rows(self, index: int, keys: list[str], start: int, stop: int) -> dict[str, np.ndarray]:
        """Steps ``[start, stop)`` of episode ``index`` (its record read and checked whole)."""
        episode = self.read_episode(index, keys)
        return {k: v[start:stop] for k, v in episode.items()}

    def read_pieces(self, key: str, pieces: list[tuple[int, int, int]]) -> list[np.ndarray]:
        """The rows of ``key`` of each piece ``(episode, start, stop)`` (a Dask import's span): from a
        plain shard only the bytes of that feature are read (where the index found them; their
        record's CRC was checked when the shard was indexed), so the tasks of the keys together read
        the dataset once; from a gzip shard the whole record."""
        leaf = self._by_key[key]
        out = []
        for index, start, stop in pieces:
            ep = self._episodes[index] if 0 <= index < len(self._episodes) else None
            span = None
            if ep is not None and not ep.problem and ep.spans[self._step_pos[leaf.path], 0] >= 0:
                span = tuple(int(x) for x in ep.spans[self._step_pos[leaf.path]])
            reader = self._reader(ep.shard) if span is not None else None
            if reader is None or reader.gzip:
                out.append(self.read_rows(index, [key], start, stop)[key])
                continue
            where = f"{reader.path}: record {ep.number} (episode {index})"
            raw = reader.read_span(*span)
            if len(raw) != span[1]:
                raise ValueError(f"{where}: {leaf.path}: the file ends inside the feature (it changed since it was "
                                 "indexed?)")
            values = self._feature(raw, (None, 0, 0, len(raw)), leaf, where)
            out.append(self._decode(leaf, values, ep.steps, where, key=key)[start:stop])
        return out

    def _decode(self, leaf: Leaf, values: Any, steps: int, where: str, key: str | None = None) -> Any:
        """A feature's list values as ``(steps,) + shape`` (``steps`` 0: an episode-level value of the
        leaf's shape)."""
        shape = ((steps,) if leaf.per_step else ()) + tuple(leaf.shape)
        if leaf.kind == "text":
            try:
                texts = [v.decode("utf-8") for v in values]
            except UnicodeDecodeError as exc:
                raise ValueError(f"{where}: {leaf.path}: text that is not UTF-8 ({exc})") from None
            return np.array(texts, dtype=object) if leaf.per_step else texts[0]
        if leaf.kind == "image":
            spec = self.keys.get(key) if key else None
            frames = [self._image(leaf, b, where, i, key) for i, b in enumerate(values)]
            want = spec.shape if spec is not None else None
            for i, f in enumerate(frames):
                if want is not None and f.shape != want:
                    raise ValueError(f"{where}: {leaf.path}, step {i}: an image of {f.shape}, the feature's is {want}")
            if not frames:
                return np.zeros((0,) + (want or tuple(max(0, d) for d in leaf.shape)), leaf.dtype)
            return np.stack(frames)
        if leaf.encoding != "none":
            arrays = []
            for i, b in enumerate(values):
                if leaf.encoding == "zlib":
                    try:
                        b = zlib.decompress(b)
                    except zlib.error as exc:
                        raise ValueError(f"{where}: {leaf.path}, value {i}: not zlib data ({exc})") from None
                a = np.frombuffer(b, dtype=leaf.dtype)
                if a.size != int(np.prod(leaf.shape, dtype=np.int64)):
                    raise ValueError(f"{where}: {leaf.path}, value {i}: {len(b)} bytes, not a {leaf.dtype} tensor of "
                                     f"shape {leaf.shape}")
                arrays.append(a.reshape(leaf.shape))
            out = np.stack(arrays) if arrays else np.zeros(shape, leaf.dtype)
            return out if leaf.per_step else out[0]
        values = np.asarray(values)
        if leaf.dtype == np.bool_:
            values = values != 0
        elif leaf.dtype == np.uint64:
            values = values.view(np.uint64)
        else:
            values = values.astype(leaf.dtype)
        return values.reshape(shape)

    def _image(self, leaf: Leaf, data: bytes, where: str, step: int, key: str | None) -> np.ndarray:
        import imagecodecs

        try:
            if data[:2] == b"\xff\xd8":
                img = imagecodecs.jpeg8_decode(data)
            elif data[:8] == b"\x89PNG\r\n\x1a\n":
                img = imagecodecs.png_decode(data)
            else:
                raise ValueError(f"neither PNG nor JPEG (starts {bytes(data[:8])!r})")
        except Exception as exc:
            raise ValueError(f"{where}: {leaf.path}, step {step}: the image does not decode ({exc})") from None
        if img.ndim == 2:
            img = img[..., None]
        if img.dtype != leaf.dtype:
            raise ValueError(f"{where}: {leaf.path}, step {step}: a {img.dtype} image, features.json says {leaf.dtype}")
        if data[:2] == b"\xff\xd8" and (key in self._passthrough or (self._choices_unknown and not self._reencode)):
            image_bytes.register(img, data, "jpeg")  # a no-op outside an import's session
        return img

    # ------------------------------------------------------------------------------------ the rest
    def episode_id(self, index: int) -> int:
        return int(index)

    def episode_attrs(self, index: int) -> dict[str, Any]:
        ep = self._episodes[index]
        out: dict[str, Any] = {"split": self.split, "shard": self.shards[ep.shard][0].name, "record": ep.number,
                               "length": ep.steps}
        for path, value in ep.values.items():  # episode-level features, nested by their paths
            *parents, leaf = path.split("/")
            d = out
            for p in parents:
                d = d.setdefault(p, {})
            d[leaf] = value
        if self._language:
            out["tasks"] = list(ep.tasks)
        return out

    def frame_bytes(self, key: str, indices: list[int] | None = None) -> float | None:
        """Bytes a frame of camera ``key`` takes in the shards (its encoded images' bytes over their
        frames), for the episodes ``indices`` (None: all)."""
        if key not in self._cam_bytes:
            return None
        chosen = range(len(self._episodes)) if indices is None else indices
        frames = sum(int(self.episode_lengths[i]) for i in chosen)
        return sum(self._cam_bytes[key][i] for i in chosen) / frames if frames else None

    def close(self) -> None:
        """Close every thread's open shard (a reader used again reopens its file)."""
        with self._open_lock:
            readers = list(self._open)
        for r in readers:
            r.close()


def _default(leaf: Leaf, spec: KeySpec, steps: int) -> np.ndarray:
    """TFDS's value of an absent optional feature: the dtype's minimum (False, b'' for text)."""
    shape = (steps,) + spec.shape
    if leaf.kind == "text":
        return np.array([""] * steps, dtype=object)
    if spec.dtype == np.bool_:
        return np.zeros(shape, bool)
    info = np.iinfo(spec.dtype) if spec.dtype.kind in "iu" else np.finfo(spec.dtype)
    return np.full(shape, info.min, spec.dtype)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist() if value.ndim else value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value
