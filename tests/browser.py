"""A headless Chromium driven over its DevTools protocol on a pipe (``--remote-debugging-pipe``), for the tests.

The pipe needs no package beyond the standard library (no websocket, no Playwright and its browser
downloads): Chromium reads commands, JSON each ended by a NUL byte, from its file descriptor 3 and
writes answers and events the same way to 4. ``Browser.open`` loads a page in a fresh tab and keeps its
console errors and uncaught exceptions; ``evaluate`` runs JavaScript in it, ``click`` clicks at an
element's centre with the mouse, ``screenshot`` takes a PNG.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe", "--window-size=1280,1024")


def chromium() -> str | None:
    """The path of Debian's chromium (or chromium-browser), None when there is none."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self, executable: str, timeout: float = 60.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="arc-kit-chromium-")
        commands_read, self._commands = os.pipe()  # we write commands; Chromium reads them on its fd 3
        self._answers, answers_write = os.pipe()  # Chromium writes on its fd 4; we read them

        def descriptors():  # in the child, before exec: the pipe's ends at 3 and 4
            os.dup2(commands_read, 3)
            os.dup2(answers_write, 4)

        self.process = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                        pass_fds=(3, 4), preexec_fn=descriptors, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        os.close(commands_read)
        os.close(answers_write)
        self._buffer, self._next_id, self.session = b"", 0, None
        self.events: list[dict] = []

    def send(self, method: str, session: bool = True, **params) -> dict:
        """Send one command (to the page's session unless ``session`` is False) and wait for its answer."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._read()
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def _read(self) -> dict:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium gave no answer")
            chunk = os.read(self._answers, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, url: str) -> None:
        """A new tab at ``url``, its page loaded; console and exception events kept in ``events``."""
        target = self.send("Target.createTarget", session=False, url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", session=False, targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send("Page.navigate", url=url)
        deadline = time.monotonic() + self.timeout
        while not any(event.get("method") == "Page.loadEventFired" for event in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load")
            self.events.append(self._read())

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries of the page so far."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params.get("exceptionDetails", {}))[:300])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(json.dumps(params.get("args", []))[:300])
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(params["entry"].get("text", ""))
        return found

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A mouse click (press and release) at the centre of the first element ``selector`` finds."""
        box = self.evaluate(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                            ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def screenshot(self) -> bytes:
        return base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False)
            self.process.wait(timeout=20)
        except Exception:  # noqa: BLE001 - a browser that will not close is killed
            self.process.kill()
            self.process.wait()
        finally:
            os.close(self._commands)
            os.close(self._answers)
            shutil.rmtree(self.profile, ignore_errors=True)
