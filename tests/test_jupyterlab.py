"""JupyterLab as a user opens it (`make lab`): notebook 01 runs to the end in headless Chromium.

Debian's chromium and chromedriver (`make browser`) are passed by path, so Selenium Manager never
runs (no network). JupyterLab's config, data, runtime and settings live in a temp folder, and it
opens a copy of the notebook under outputs/ (git-ignored), so neither $HOME nor notebooks/ change.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_main_results.ipynb"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
START_S, RUN_S = 90, 240

pytestmark = pytest.mark.slow


def _need_browser() -> None:
    """CI must run this test (fail with the fix); a workstation without Chromium may skip it."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (pip install -e '.[test]')")
    if missing:
        msg = f"JupyterLab browser test needs {', '.join(missing)}: run `make browser`"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_settings(settings: Path) -> None:
    """All cells in the DOM (no windowing), no autosave, no news fetched from the internet."""
    for plugin, values in {
        "notebook-extension/tracker": {"windowingMode": "none"},
        "docmanager-extension/plugin": {"autosave": False},
        "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    }.items():
        f = settings / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(values))


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


@pytest.fixture
def lab(tmp_path, request):
    """A JupyterLab server on loopback, rooted at the repository like `make lab`; yields
    (base_url, token, notebook path relative to the root, server log)."""
    _need_browser()
    home = tmp_path / "jupyter"
    env = dict(os.environ)
    for var, sub in (
        ("JUPYTER_CONFIG_DIR", "config"),
        ("JUPYTER_DATA_DIR", "data"),
        ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("IPYTHONDIR", "ipython"),
    ):
        env[var] = str(home / sub)
    _write_settings(home / "config" / "lab" / "user-settings")

    # a fresh copy without outputs, one folder below outputs/ so repo_root() still finds the kit
    work = ROOT / "outputs" / "lab_test" / secrets.token_hex(4)
    work.mkdir(parents=True)

    def clean() -> None:
        shutil.rmtree(work, ignore_errors=True)
        with contextlib.suppress(OSError):  # outputs/lab_test/ goes too once no other run uses it
            work.parent.rmdir()

    request.addfinalizer(clean)
    nb = json.loads(NOTEBOOK.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    (work / NOTEBOOK.name).write_text(json.dumps(nb))

    port, token, log = _free_port(), secrets.token_hex(16), tmp_path / "lab.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter",
                "lab",
                "--no-browser",
                "--ip=127.0.0.1",
                f"--port={port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={ROOT}",
                "--LabApp.expose_app_in_browser=True",
                *(["--allow-root"] if os.geteuid() == 0 else []),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop() -> None:  # SIGTERM lets the server shut its kernels down
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass

    request.addfinalizer(stop)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_S
    while True:
        try:
            req = urllib.request.Request(f"{base}/api/status", headers={"Authorization": f"token {token}"})
            with urllib.request.urlopen(req, timeout=5):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                why = f"exited with {proc.returncode}" if proc.returncode is not None else f"no answer in {START_S} s"
                pytest.fail(f"JupyterLab server: {why} on /api/status; its log:\n{_tail(log)}")
            time.sleep(0.5)
    yield base, token, (work / NOTEBOOK.name).relative_to(ROOT).as_posix(), log


@pytest.fixture
def browser(request):
    """Headless Chromium through Debian's chromedriver, both by explicit path."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=opts)
    request.addfinalizer(driver.quit)
    return driver


# The open notebook panel, through the app JupyterLab exposes (expose_app_in_browser).
PANEL = "const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
READY = (
    PANEL
    + """
return !!(w && w.content && w.context && w.context.isReady && w.sessionContext.session
          && w.sessionContext.session.kernel && w.sessionContext.session.kernel.status === 'idle');"""
)
RUN_ALL = """
window.__runAll = 'running';
window.jupyterapp.commands.execute('notebook:run-all-cells').then(
  r => { window.__runAll = String(r); }, e => { window.__runAll = 'failed: ' + e; });"""
PROGRESS = (
    PANEL
    + """
const code = w.content.widgets.filter(c => c.model.type === 'code');
return {runAll: window.__runAll, kernel: w.sessionContext.session.kernel.status,
        counts: code.map(c => c.model.executionCount)};"""
)
# What the page shows: errors (model and DOM), the Table 7 frame and the Figure 3 image, each
# found in the first code cell after its markdown heading.
CHECK = (
    PANEL
    + """
const cells = w.content.widgets;
const after = heading => {
  const i = cells.findIndex(c => c.model.type === 'markdown' && c.model.sharedModel.getSource().startsWith(heading));
  return i < 0 ? null : cells.slice(i + 1).find(c => c.model.type === 'code');
};
const errors = [];
for (const c of cells.filter(c => c.model.type === 'code'))
  for (const o of c.model.outputs.toJSON())
    if (o.output_type === 'error') errors.push(o.ename + ': ' + o.evalue);
const stderr = [...document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
  .map(n => n.textContent).filter(t => t.includes('Traceback'));
const t7 = after('## Table 7');
const table = t7 && t7.node.querySelector('.jp-OutputArea-output table');
const f3 = after('## Figure 3');
const img = f3 && f3.node.querySelector('.jp-OutputArea-output img[src^="data:image/png"]');
if (f3) (img || f3.node).scrollIntoView({block: 'center'});
return {errors, stderr, table: table ? table.textContent : null,
        img: img ? [img.naturalWidth, img.naturalHeight] : null,
        headings: [...document.querySelectorAll('.jp-MarkdownOutput h2')].map(h => h.textContent)};"""
)


def _wait(driver, script: str, timeout: float, what: str, until=bool):
    """Poll a script until `until(result)`; fail with the page text so CI logs say what went wrong."""
    deadline = time.monotonic() + timeout
    while True:
        result = driver.execute_script(script)
        if until(result):
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout:.0f} s (last: {result!r})\n{_page(driver)}")
        time.sleep(1)


def _page(driver) -> str:
    try:
        return "page text (tail):\n" + driver.execute_script("return document.body.innerText")[-4000:]
    except Exception as e:  # noqa: BLE001 - diagnostics only
        return f"(no page text: {e})"


def test_notebook_01_runs_in_jupyterlab(lab, browser, tmp_path):
    base, token, path, log = lab
    browser.get(f"{base}/lab/tree/{path}?token={token}")
    _wait(browser, READY, START_S, "notebook panel with an idle kernel")
    browser.execute_script(RUN_ALL)
    done = lambda r: r["runAll"] != "running" and r["kernel"] == "idle" and all(n is not None for n in r["counts"])  # noqa: E731
    progress = _wait(browser, PROGRESS, RUN_S, "run all cells", until=done)
    seen = browser.execute_script(CHECK)
    time.sleep(0.5)  # let the scroll to Figure 3 paint
    browser.save_screenshot(str(tmp_path / "notebook_01.png"))
    why = f"{seen!r}\nrun: {progress!r}\nscreenshot: {tmp_path / 'notebook_01.png'}\n{_page(browser)}\nserver log:\n{_tail(log)}"
    assert progress["runAll"] == "true" and not seen["errors"] and not seen["stderr"], f"a cell failed: {why}"
    table = seen["table"] or ""
    assert all(k in table for k in ("mean_diff", "reflexion", "joint_memory")), f"no Table 7 frame: {why}"
    assert seen["img"] and min(seen["img"]) > 100, f"no Figure 3 PNG (text '<Figure ...>' = inline backend off): {why}"
