"""Where the diffusion-policy importer used to live: it is now the ``diffusion-policy`` format on the
shared import pipeline (:mod:`replaybuf_core.importing`, :mod:`replaybuf_core.formats`); these names
are re-exported for code that imports them from here."""

from replaybuf_core.formats.diffusion_policy import import_diffusion_policy
from replaybuf_core.importing import ImportReport, KeyReport

__all__ = ["ImportReport", "KeyReport", "import_diffusion_policy"]
