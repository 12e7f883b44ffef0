"""The Ray dashboard as a user opens it after a short simulated sweep: locked until the token the sweep
points to is entered in its login dialog, then the Cluster tab lists the node and the job's task table
lists the trials by name, with little else beside them. Driven in headless Chromium over the DevTools
protocol; skipped where no Chromium is installed."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import ray
from e2ehelp import HEADLESS, chromium, require_chromium
from ray._raylet import Config
from ray.cluster_utils import Cluster

from benchmarks.system.live import run_sweep
from orchestrator.cli import resolve_profile
from orchestrator.driver.dispatch import cluster
from orchestrator.driver.dispatch.placement import TRIAL_SLOT
from orchestrator.driver.dispatch.trial_channel import CHANNEL_NAME
from orchestrator.spec.sweep_spec import load_spec

pytestmark = [pytest.mark.slow, pytest.mark.browser]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
TRIALS = 3
LAUNCHED = TRIALS + 1  # the no-speculation baseline runs on top of the budget


@dataclass(frozen=True)
class Sweep:
    url: str
    login: str
    job_id: str
    node_ip: str


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sweep]:
    """A 3-trial demo sweep on a one-node cluster with its dashboard; Ray stays up for the browser."""
    require_chromium()
    if ray.is_initialized():
        ray.shutdown()
    spec = load_spec(ROOT / "trials" / "demo.yaml")
    spec = spec.model_copy(
        update={"workload": spec.workload.model_copy(update={"num_prompts": 8, "concurrency": [4, 8]})}
    )
    work = tmp_path_factory.mktemp("dash")
    # A head of its own on free ports (other Ray instances may run on this machine: the dashboard agent's
    # default port would be taken, and then the dashboard cannot read logs), joined as `--ray-address`
    # joins a cluster. Ray's socket paths must stay short: its sessions go to a folder directly in /tmp.
    monkeypatch = pytest.MonkeyPatch()
    # Token authentication on, as on a cluster started by `ray start` (and as `ray.init` does on its own).
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    Config.initialize("")  # what Ray itself calls to make this process see the mode
    with tempfile.TemporaryDirectory(prefix="ss-dash-", dir="/tmp") as ray_tmp:
        head = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 2,
                "num_gpus": spec.node.gpus,
                "resources": {TRIAL_SLOT: 1},
                "include_dashboard": True,
                "dashboard_port": _free_port(),
                "dashboard_agent_listen_port": _free_port(),
                "temp_dir": ray_tmp,
            },
        )
        try:
            info = cluster.connect(spec, head.address)
            login = cluster.dashboard_login()
            assert info.dashboard_url and login, "the cluster has a dashboard and token auth"
            run_sweep(spec, resolve_profile(spec) or {}, TRIALS, work, nodes=1)
            node_ip = ray.nodes()[0]["NodeManagerAddress"]
            yield Sweep(info.dashboard_url, login, ray.get_runtime_context().get_job_id(), node_ip)
        finally:
            ray.shutdown()
            head.shutdown()
            monkeypatch.undo()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_short_sweep_leaves_the_trials_and_little_else_in_the_task_list(swept: Sweep) -> None:
    from ray.util.state import list_tasks

    deadline = time.monotonic() + 30
    while True:  # task events reach the dashboard in batches
        names = [t.name for t in list_tasks(swept.url, limit=10_000, raise_on_missing_output=False)]
        trials = [n for n in names if re.match(r"trial-\d+ ", n)]
        if len(trials) >= LAUNCHED or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert len(trials) == LAUNCHED, names
    others = [n for n in names if n not in trials]
    # The channel's creation task; no task per report, verdict or poll (there were dozens per trial).
    assert len(others) <= 2, others


def test_the_login_the_sweep_prints_opens_the_dashboard_on_the_node_and_the_trials(swept: Sweep) -> None:
    binary = chromium()
    assert binary is not None
    # The command the sweep prints ("print it: .../ray get-auth-token"), run as a user would.
    command = re.search(r"print it: (\S+) get-auth-token", swept.login)
    assert command, swept.login
    token = subprocess.run(
        [command.group(1), "get-auth-token"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ss-chromium-") as profile:
        pages = asyncio.run(_browse(binary, Path(profile), swept, token))
    assert "Authentication Token Required" in pages["locked"]
    cluster_text = pages["cluster"]
    assert swept.node_ip in cluster_text and "ALIVE" in cluster_text, cluster_text[:3000]
    job_text = pages["job"]
    # Every launched trial by name (a predicted OOM is never launched, so the numbers may skip one).
    assert len(set(re.findall(r"trial-(\d+) mf\d", job_text))) == LAUNCHED, job_text[:3000]
    assert CHANNEL_NAME in pages["actors"], pages["actors"][:3000]
    assert "node health:" in pages["actor_log"], pages["actor_log"][:3000]


async def _browse(binary: str, profile: Path, swept: Sweep, token: str) -> dict[str, str]:
    proc = subprocess.Popen(
        [
            binary,
            *HEADLESS,
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "--window-size=1500,1000",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            assert proc.poll() is None and time.monotonic() < deadline, "Chromium did not start"
            await asyncio.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as answer:
                targets = await answer.json()
            page = next(t for t in targets if t["type"] == "page")
            async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                return await _visit(_Cdp(ws), swept, token)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


async def _visit(cdp: _Cdp, swept: Sweep, token: str) -> dict[str, str]:
    pages: dict[str, str] = {}
    await cdp.call("Page.enable")
    await cdp.call("Page.navigate", url=f"{swept.url}/#/overview")
    pages["locked"] = await cdp.text_with("Authentication Token Required")
    await cdp.shot("ray-dashboard-login.png")
    # Type the token into the dialog's field and submit, as a user does.
    await cdp.eval("document.querySelector(\"input[placeholder='Enter your authentication token']\").focus()")
    await cdp.call("Input.insertText", text=token)
    await cdp.eval(
        '[...document.querySelectorAll("button")].find(b => b.textContent.trim() === "Submit").click()'
    )
    await cdp.until("!document.body.innerText.includes('Authentication Token Required')")
    await cdp.call("Page.navigate", url=f"{swept.url}/#/cluster")
    pages["cluster"] = await cdp.text_with(swept.node_ip)
    await cdp.shot("ray-dashboard-cluster.png")
    await cdp.call("Page.navigate", url=f"{swept.url}/#/jobs/{swept.job_id}")
    await cdp.text_with("Task Table")
    # The job page folds its tables: open the task table (the deepest element titled so takes the click).
    await cdp.eval(
        '[...document.querySelectorAll("*")].filter(e => e.textContent.trim() === "Task Table").pop().click()'
    )
    pages["job"] = await cdp.text_with("trial-0 ")
    await cdp.shot("ray-dashboard-job.png", full=True)
    await cdp.call("Page.navigate", url=f"{swept.url}/#/actors")
    pages["actors"] = await cdp.text_with(CHANNEL_NAME)
    await cdp.shot("ray-dashboard-actors.png")
    await cdp.eval(
        f'[...document.querySelectorAll("a")].find(a => a.closest("tr") && a.closest("tr").innerText'
        f'.includes("{CHANNEL_NAME}") && /^[0-9a-f]{{8,}}/.test(a.innerText.trim())).click()'
    )
    # The actor's page ends with its log; the board is on stderr, the tab it opens on.
    pages["actor_log"] = await cdp.text_with("node health:")
    await cdp.shot("ray-dashboard-actor-log.png")
    return pages


class _Cdp:
    """The few DevTools protocol calls the test needs, over one page's websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0

    async def call(self, method: str, check: bool = True, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        await self.ws.send_str(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads((await self.ws.receive(timeout=60)).data)
            if message.get("id") == self.next_id:
                assert not check or "error" not in message, message
                result: dict[str, Any] = message.get("result", {})
                return result

    async def eval(self, expression: str) -> Any:
        # Unchecked: the page may reload under an evaluation (it does after the login); that reads as None.
        answer = await self.call("Runtime.evaluate", check=False, expression=expression, returnByValue=True)
        return answer.get("result", {}).get("value")

    async def until(self, expression: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not await self.eval(f"Boolean({expression})"):
            if time.monotonic() > deadline:
                await self.shot("ray-dashboard-failed.png")  # what the page showed instead
                pytest.fail(f"never true: {expression}\n{await self.body()}")
            await asyncio.sleep(0.5)

    async def body(self) -> str:
        return str(await self.eval("document.body ? document.body.innerText : ''"))

    async def text_with(self, needle: str, timeout_s: float = 60.0) -> str:
        await self.until(
            f"document.body && document.body.innerText.includes({json.dumps(needle)})", timeout_s
        )
        await asyncio.sleep(1.0)  # let the rest of the page's requests land before it is read and shot
        return await self.body()

    async def shot(self, name: str, full: bool = False) -> None:
        answer = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=full)
        (ARTIFACTS / name).write_bytes(base64.b64decode(answer["data"]))
