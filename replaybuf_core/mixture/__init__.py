"""Mixtures of stores: weighted samples of several stores (any backend, local or on object storage,
different schemas) under one schema, in an epoch order that is the same on any number of ranks and
workers and resumes at any position.

* :class:`Mixture` — the stores, checked against the key rules before anything is read
  (:mod:`.mixture`); its sources (:class:`MixtureSource`) and keys (:class:`MixtureKey`) as the
  user writes them (:mod:`.spec`); the rules (:mod:`.schema`); a TOML / YAML file of it
  (:mod:`.config`); its statistics pooled or per store (:mod:`.stats`).
* The epoch order (:mod:`.order`) over O(1) pseudo-random permutations (:mod:`.permutation`).

The PyTorch dataset and its resumable loader are :class:`replaybuf_core.torch.MixtureDataset` and
:class:`replaybuf_core.torch.MixtureLoader`.
"""

from .mixture import Mixture
from .order import EpochOrder
from .spec import SIZE, MixtureKey, MixtureSource

__all__ = ["Mixture", "MixtureSource", "MixtureKey", "EpochOrder", "SIZE"]
