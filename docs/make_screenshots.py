"""Screenshots of ``replaybuf serve`` for the docs: ``python docs/make_screenshots.py [SOURCE]``.

Imports SOURCE (default: the two-camera LeRobot v3 fixture in shared/data) into a temporary store,
serves it and photographs the episode list (two episodes marked), one episode (scrubbed to a step)
and the statistics in headless Chromium (Debian's ``chromium``, driven by Playwright), into
``docs/images/viewer-*.png``."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from replaybuf_core.cli import main
from replaybuf_core.viewer.app import create_app
from replaybuf_core.viewer.server import ServerThread

HERE = Path(__file__).resolve().parent
DEFAULT = next(p for p in (HERE.parent.parent / "shared" / "data" / "lerobot_v3_synthetic_2cam",
                           Path("/work/shared/data/lerobot_v3_synthetic_2cam")) if p.exists())
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def shoot(source: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store.zarr"
        assert main(["import", str(source), str(store), "--no-progress"]) == 0
        with ServerThread(create_app(str(store), writable=True)) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1100, "height": 700})
            page.goto(url)
            page.wait_for_selector("tr.episode-row")
            for ep in (2, 5):
                page.check(f"tr[data-episode='{ep}'] input.mark")
            page.wait_for_function("document.querySelector('#commands').textContent.includes('edit delete')")
            page.screenshot(path=str(HERE / "images" / "viewer-list.png"), full_page=True)
            page.goto(url + "#/episode/1")
            page.wait_for_selector("#cameras canvas[data-step='0']")
            page.locator("#step").fill("45")
            page.wait_for_selector("#cameras canvas[data-step='45']")
            page.screenshot(path=str(HERE / "images" / "viewer-episode.png"), full_page=True)
            page.goto(url + "#/stats")
            page.wait_for_selector(".stats-key")
            page.screenshot(path=str(HERE / "images" / "viewer-stats.png"))
            browser.close()


if __name__ == "__main__":
    shoot(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)
