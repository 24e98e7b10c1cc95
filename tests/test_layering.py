"""The house rules: the import contracts of pyproject.toml hold (floors, backends, no cycles), they
catch a breach when one is made, and the top of replaybuf_core holds only the contracts and the
subpackages (docs/architecture.md)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter", reason="import-linter is in the test extra")

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("replaybuf_core", "replaybuf_numpy", "replaybuf_zarr")
LINT = ("import sys, importlinter.cli as c; "
        "sys.exit(c.lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")

#: the contracts: the only modules at the top of replaybuf_core (beside its subpackages)
CONTRACT_MODULES = {"__init__", "compiled", "errors", "export_format", "hookspecs", "interrupts", "locations", "locking", "protocol", "registry", "source"}
SUBPACKAGES = {"cli", "cluster", "exporting", "formats", "importing", "inspection", "layout", "mixture", "recording",
               "sampling", "stats", "store", "synthetic", "testing", "torch", "viewer"}
MAX_MODULE_LINES = 600


def _lint(tree: Path, config: Path | None = None) -> subprocess.CompletedProcess:
    """Run import-linter on the packages under ``tree`` with ``config`` (default ``tree/pyproject.toml``)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    code = LINT if config is None else LINT.replace("'pyproject.toml'", repr(str(config)))
    return subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=300)


def _verdicts(out: str) -> dict[str, str]:
    """Contract name -> 'KEPT' / 'BROKEN' from import-linter's summary lines."""
    found = {}
    for line in out.splitlines():
        for verdict in ("KEPT", "BROKEN"):
            if f" {verdict}" in line:
                found[line.split(f" {verdict}")[0].strip()] = verdict
    return found


def test_the_import_contracts_hold():
    run = _lint(ROOT)
    verdicts = _verdicts(run.stdout)
    assert len(verdicts) == 4 and set(verdicts.values()) == {"KEPT"}, run.stdout + run.stderr
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.skipif(importlib.util.find_spec("replaybuf_hdf5") is None, reason="the HDF5 plugin is not installed")
def test_the_hdf5_plugin_imports_only_the_contracts():
    run = _lint(ROOT / "plugins" / "replaybuf-hdf5", ROOT / "plugins" / "replaybuf-hdf5" / "pyproject.toml")
    assert _verdicts(run.stdout) == {
        "the HDF5 backend imports only the contracts and the layout vocabulary": "KEPT"}, run.stdout + run.stderr


@pytest.fixture(scope="module")
def copy_of_the_packages(tmp_path_factory) -> Path:
    tree = tmp_path_factory.mktemp("house")
    for p in PACKAGES:
        shutil.copytree(ROOT / p, tree / p, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


@pytest.mark.parametrize("module, line, broken", [
    # the store importing the sampler: a floor imports upward
    ("replaybuf_core/store/writer.py", "import replaybuf_core.sampling.sampler", "replaybuf_core floors"),
    # the commit record importing the buffer, which imports it: a cycle inside the store
    ("replaybuf_core/store/commit.py", "from . import buffer", "no import cycles"),
    # a backend importing the store
    ("replaybuf_zarr/chunk_writer.py", "import replaybuf_core.store.buffer", "backends import only"),
    # the core importing a backend
    ("replaybuf_core/store/editing.py", "import replaybuf_zarr.layout", "replaybuf_core never imports"),
])
def test_a_breach_of_each_rule_is_caught(copy_of_the_packages, module, line, broken):
    """The check is real: one added import line breaks exactly the contract it violates."""
    path = copy_of_the_packages / module
    original = path.read_text()
    path.write_text(original + f"\n{line}  # added by the test\n")
    try:
        run = _lint(copy_of_the_packages)
    finally:
        path.write_text(original)
    assert run.returncode != 0, run.stdout
    broken_now = [name for name, v in _verdicts(run.stdout).items() if v == "BROKEN"]
    assert any(name.startswith(broken) for name in broken_now), run.stdout


def test_the_top_of_replaybuf_core_holds_the_contracts_and_the_subpackages_only():
    top = ROOT / "replaybuf_core"
    modules = {p.stem for p in top.glob("*.py")}
    packages = {p.name for p in top.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert modules == CONTRACT_MODULES, sorted(modules ^ CONTRACT_MODULES)
    assert packages == SUBPACKAGES, sorted(packages ^ SUBPACKAGES)
    for name in sorted(packages):  # each package says what its one idea is
        doc = (top / name / "__init__.py").read_text()
        assert doc.lstrip().startswith('"""') and "TODO" not in doc, name


def test_no_module_is_longer_than_the_house_limit():
    roots = [ROOT / p for p in PACKAGES] + [ROOT / "plugins", ROOT / "benchmarks"]
    long = {str(f.relative_to(ROOT)): n for r in roots for f in r.rglob("*.py")
            if not any(part.startswith(".") for part in f.relative_to(ROOT).parts)  # .venv-lerobot and such
            and (n := len(f.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these along their ideas (over {MAX_MODULE_LINES} lines): {long}"


def test_the_store_has_no_import_cycle_even_counting_annotations():
    """``ReplayBuffer``'s parts (the mixins, ``rb[key]``, the writer) no longer import it back, not even
    under ``if TYPE_CHECKING:`` (issue 50: the house's only circle was ``buffer.py`` <->
    ``buffer_appending`` / ``buffer_copying`` / ``step_array`` / ``writer``)."""
    import grimp

    graph = grimp.build_graph("replaybuf_core", exclude_type_checking_imports=False)
    store = sorted(m for m in graph.modules if m.startswith("replaybuf_core.store."))
    cycles = sorted({tuple(sorted((a, b))) for a in store for b in graph.find_modules_directly_imported_by(a)
                     if b.startswith("replaybuf_core.store.") and graph.find_shortest_chain(importer=b, imported=a)})
    assert cycles == []
