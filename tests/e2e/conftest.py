"""Fixtures for the end-to-end tests of `pagoda serve`: start the binary on a free
loopback port (it picks one: --port 0, read back from its log), wait for /health,
and stop it with SIGTERM."""

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("PAGODA_BINARY", REPO / "build" / "pagoda"))
FIXTURES = Path(os.environ.get("PAGODA_FIXTURES", REPO.parent / "shared" / "fixtures"))
STORIES = FIXTURES / "models" / "stories260K"
CHAT_TEMPLATE = REPO / "tests" / "data" / "e2e_chatml_chat_template.jinja"
STARTUP_TIMEOUT_S = 180
# Arguments added to every `pagoda serve` (scripts/gpu-check: "--device cuda").
EXTRA_SERVE_ARGS = os.environ.get("PAGODA_E2E_SERVE_ARGS", "").split()


class Server:
    def __init__(self, args, log_path):
        self.log_path = log_path
        self.log = open(log_path, "w+b")
        cmd = [str(BINARY), "serve", "--host", "127.0.0.1", "--port", "0", "--stats-interval", "1", *args,
               *EXTRA_SERVE_ARGS]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        self.port = None
        while self.port is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pagoda serve exited with {self.proc.returncode}:\n{self.log_text()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"pagoda serve did not start:\n{self.log_text()}")
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", self.log_text())
            if m:
                self.port = int(m.group(1))
            else:
                time.sleep(0.05)
        self.base = f"http://127.0.0.1:{self.port}"
        while True:
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def log_text(self):
        return Path(self.log_path).read_text(errors="replace")

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def stories_args(*extra):
    return ["--model", str(STORIES / "stories260K.bin"), "--tokenizer", str(STORIES / "tok512.bin"), *extra]


@pytest.fixture(scope="session", autouse=True)
def _check_binary():
    if not BINARY.exists():
        pytest.exit(f"no pagoda binary at {BINARY} (set PAGODA_BINARY)", returncode=2)
    if not (STORIES / "stories260K.bin").exists():
        pytest.exit(f"no fixtures at {FIXTURES} (set PAGODA_FIXTURES)", returncode=2)


@pytest.fixture(scope="module")
def start_server(tmp_path_factory):
    servers = []

    def start(args, name="server"):
        s = Server(args, tmp_path_factory.mktemp(name) / "server.log")
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def stories(start_server):
    return start_server(
        stories_args("--chat-template", str(CHAT_TEMPLATE), "--served-model-name", "stories"), "stories")


@pytest.fixture(scope="module")
def hf_model_dir(tmp_path_factory):
    """models/hf/llama-mqa with a chat_template added to its tokenizer_config.json."""
    src = FIXTURES / "models" / "hf" / "llama-mqa"
    dst = tmp_path_factory.mktemp("llama-mqa")
    for f in src.iterdir():
        if f.name != "tokenizer_config.json":
            os.symlink(f, dst / f.name)
    import json
    config = json.loads((src / "tokenizer_config.json").read_text())
    config["chat_template"] = CHAT_TEMPLATE.read_text()
    (dst / "tokenizer_config.json").write_text(json.dumps(config))
    return dst


def which_promtool():
    return shutil.which("promtool")
