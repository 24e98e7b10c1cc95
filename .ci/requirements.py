"""Print, one per line, the third-party requirements of the README's test install
(``pip install -e ".[test]" -e plugins/replaybuf-hdf5``): the project's dependencies and its ``test``
extra (self-references such as ``replaybuf[lerobot,...]`` expanded), and the HDF5 plugin's
dependencies (less ``replaybuf`` itself).  .ci/run installs them into a leg's environment ahead of
its turn, so the leg's own install of the README's command only builds the two editable packages."""

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _project(path: Path) -> dict:
    return tomllib.loads(path.read_text())["project"]


def _name(req: str) -> str:
    return re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0].strip().lower().replace("_", "-")


def requirements() -> list[str]:
    project = _project(ROOT / "pyproject.toml")
    extras, own = project.get("optional-dependencies", {}), project["name"].lower()
    out, seen = list(project.get("dependencies", [])), set()

    def add_extra(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for req in extras[name]:
            if _name(req) == own:
                for inner in re.search(r"\[([^\]]*)\]", req).group(1).split(","):
                    add_extra(inner.strip())
            else:
                out.append(req)

    add_extra("test")
    plugin = _project(ROOT / "plugins" / "replaybuf-hdf5" / "pyproject.toml")
    out += [r for r in plugin.get("dependencies", []) if _name(r) != own]
    return list(dict.fromkeys(out))


if __name__ == "__main__":
    sys.stdout.write("\n".join(requirements()) + "\n")
