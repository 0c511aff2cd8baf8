"""Driving Debian's headless Chromium from tests: the DOM after scripts ran, screenshots, and a
small Chrome DevTools Protocol client (over aiohttp's websocket) for pages that change over time."""

from __future__ import annotations

import asyncio
import json
import os
import re
import struct
import subprocess
import threading
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

from tests.prerequisites import require_program

CHROMIUM = os.environ.get("MERITLENS_TEST_CHROMIUM", "/usr/bin/chromium")
_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
)


def require_chromium() -> str:
    return require_program(CHROMIUM, what="headless Chromium for the dashboard tests",
                           install="apt-get install --no-install-recommends chromium")


def _run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([require_chromium(), *_FLAGS, *args], capture_output=True, timeout=timeout)


def dump_dom(url: str, profile: Path, *, budget_ms: int = 5000) -> str:
    """The page's DOM after its scripts ran (and their fetches finished) for ``budget_ms`` of virtual time."""
    proc = _run([f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", "--dump-dom", url])
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    return proc.stdout.decode()


def screenshot(url: str, path: Path, profile: Path, *, size: tuple[int, int] = (1280, 900),
               budget_ms: int = 5000) -> tuple[int, int]:
    """Save a PNG of the page; return its (width, height) read from the file."""
    proc = _run([f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}",
                 f"--window-size={size[0]},{size[1]}", f"--screenshot={path}", url])
    assert proc.returncode == 0 and path.exists(), proc.stderr.decode(errors="replace")[-2000:]
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


# --- a parsed DOM ---------------------------------------------------------------------------------
class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: Node | None):
        self.tag = tag
        self.attrs = attrs
        self.parent = parent
        self.children: list[Node | str] = []

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def iter(self):
        yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.iter()

    def find_all(self, tag: str | None = None, **attrs) -> list[Node]:
        """Descendants with this tag (any if None) whose attributes equal ``attrs``
        (underscores in names stand for dashes; ``class_`` matches one class)."""
        out = []
        for node in self.iter():
            if node is self or (tag and node.tag != tag):
                continue
            if all(_attr_matches(node, name, value) for name, value in attrs.items()):
                out.append(node)
        return out

    def find(self, tag: str | None = None, **attrs) -> Node:
        found = self.find_all(tag, **attrs)
        assert found, f"no <{tag or '*'}> with {attrs}"
        return found[0]


def _attr_matches(node: Node, name: str, value) -> bool:
    if name == "class_":
        return value in node.attrs.get("class", "").split()
    key = name.replace("_", "-")
    if value is True:
        return key in node.attrs
    return node.attrs.get(key) == value


_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Builder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.current = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs}, self.current)
        self.current.children.append(node)
        if tag not in _VOID:
            self.current = node

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.current))

    def handle_endtag(self, tag):
        node = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.current = node.parent

    def handle_data(self, data):
        self.current.children.append(data)


def parse_dom(html: str) -> Node:
    builder = _Builder()
    builder.feed(html)
    return builder.root


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


# --- Chrome DevTools Protocol ---------------------------------------------------------------------
class DevToolsPage:
    """A headless Chromium with one page, driven over the DevTools Protocol.

    ``evaluate(js)`` returns the expression's value; ``wait_for(js)`` polls until it is truthy.
    Uncaught page exceptions are collected in ``exceptions``; with ``call("Network.enable")``, the
    URLs the page requests in ``requests``."""

    def __init__(self, profile: Path, *, size: tuple[int, int] = (1280, 900)):
        self._args = [require_chromium(), *_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                      "--remote-allow-origins=*", f"--window-size={size[0]},{size[1]}", "about:blank"]
        self.exceptions: list[str] = []
        self.requests: list[str] = []  # URLs the page asked for, once Network.enable was called
        self._loop = asyncio.new_event_loop()
        self._next_id = 0
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> DevToolsPage:
        self._proc = subprocess.Popen(self._args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        endpoint = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self._proc.stderr.readline().decode(errors="replace")
            if not line and self._proc.poll() is not None:
                break
            match = re.search(r"DevTools listening on (ws://\S+)", line)
            if match:
                endpoint = match.group(1)
                break
        assert endpoint, "chromium did not start its DevTools endpoint"
        threading.Thread(target=lambda: self._proc.stderr.read(), daemon=True).start()  # keep the pipe drained
        port = int(re.search(r":(\d+)/", endpoint).group(1))
        pages = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page_ws = next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")
        self._loop.run_until_complete(self._connect(page_ws))
        self.call("Runtime.enable")
        self.call("Page.enable")
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._loop.run_until_complete(self._close())
        finally:
            self._loop.close()
            if self._proc is not None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()

    async def _connect(self, url: str) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession()
        self._ws = await self._session.ws_connect(url, max_msg_size=64 * 1024 * 1024)

    async def _close(self) -> None:
        await self._ws.close()
        await self._session.close()

    async def _call(self, method: str, params: dict, timeout: float) -> dict:
        self._next_id += 1
        call_id = self._next_id
        await self._ws.send_str(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = await asyncio.wait_for(self._ws.receive_json(), timeout)
            if message.get("method") == "Network.requestWillBeSent":
                self.requests.append(message["params"]["request"]["url"])
            if message.get("method") == "Runtime.exceptionThrown":
                details = message["params"]["exceptionDetails"]
                self.exceptions.append(details.get("exception", {}).get("description") or details.get("text", "?"))
            if message.get("id") == call_id:
                if "error" in message:
                    raise AssertionError(f"{method} failed: {message['error']}")
                return message.get("result", {})

    def call(self, method: str, timeout: float = 30, **params) -> dict:
        return self._loop.run_until_complete(self._call(method, params, timeout))

    def navigate(self, url: str) -> None:
        """Open ``url`` and return once its document has loaded."""
        self.call("Page.navigate", url=url)
        self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 15.0):
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except AssertionError as exc:  # e.g. the element is not there yet
                value = exc
            if value and not isinstance(value, Exception):
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {expression!r} (last value {value!r})")
            time.sleep(0.1)
