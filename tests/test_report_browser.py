"""The report in a real browser: Debian's headless chromium opens the page with networking
off, logs no JavaScript error, draws every figure (plotly's SVGs in the DOM), and its
screenshot shows plots (the report's colours on a non-blank page). The screenshot is kept
as an artifact (in $EVOKERNEL_ARTIFACTS, else the test's tmp folder; its path is printed).

Without a browser the test skips, saying so; in CI (env CI set) a missing browser fails it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from evokernel.report import write_report
from evokernel.report.figures import RUN_FIGURES
from tests._report_runs import recorded_store

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
OFFLINE = ["--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND"]


def browser() -> str:
    for name in BROWSERS:
        if path := shutil.which(name):
            return path
    reason = f"no headless browser ({', '.join(BROWSERS)}) on PATH: apt-get install -y chromium"
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must run this test; .ci/run installs it)")
    pytest.skip(reason)


def open_page(exe: str, page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    """Load `page` headless and offline; stdout and stderr (the console log) come back."""
    argv = [
        exe, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", f"--user-data-dir={profile}",
        *OFFLINE, "--enable-logging=stderr", "--v=0", "--window-size=1280,2400", "--virtual-time-budget=20000",
        *extra, page.resolve().as_uri(),
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=180)


def console_errors(log: str) -> list[str]:
    lines = [line for line in log.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    return [line for line in lines if re.search(r"uncaught|error", line, flags=re.I)]


def artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("EVOKERNEL_ARTIFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.slow
def test_the_report_draws_offline_in_a_headless_browser(tmp_path):
    exe = browser()
    # the check itself: a page that throws is caught
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    assert console_errors(open_page(exe, bad, tmp_path / "p0").stderr), "the console log shows no uncaught error"

    store, _ = recorded_store(tmp_path / "runs.db", budget=30, runs=[("default", 0), ("random", 1)])
    page = write_report(store, tmp_path / "report.html")
    dom = open_page(exe, page, tmp_path / "p1", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_errors(dom.stderr) == []
    html = dom.stdout
    for fid in RUN_FIGURES:  # plotly drew an SVG inside every figure's div (the static page has none)
        start = html.index(f'id="{fid}"')
        end = html.find("<figure", start)
        assert 'class="main-svg"' in html[start : end if end > 0 else None], f"{fid} not drawn"
    assert 'class="main-svg"' not in page.read_text()

    shot = artifacts(tmp_path) / "report-screenshot.png"
    run = open_page(exe, page, tmp_path / "p2", f"--screenshot={shot}")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    assert console_errors(run.stderr) == []
    print(f"screenshot: {shot}")
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))[..., :3]
    assert pixels.shape[0] >= 1000 and pixels.std() > 0.05
    assert (pixels.min(axis=2) < 0.9).mean() > 0.02  # not blank
    blue = np.abs(pixels - np.array([0x1F, 0x77, 0xB4]) / 255).max(axis=2) < 0.08  # the first run's colour
    assert blue.sum() > 500, "no plot drawn in the screenshot"
