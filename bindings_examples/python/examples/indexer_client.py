"""Drive NVIDIA Dynamo's standalone KV indexer (`python -m dynamo.indexer`, package ai-dynamo-runtime)
from Python: start it on loopback, register engines' event endpoints, ask it for prefix scores.

Its HTTP API (checked against ai-dynamo-runtime 1.6.1):
  POST /register {"instance_id", "endpoint", "model_name", "block_size"[, "dp_rank", "replay_endpoint"]}
  POST /query    {"token_ids": [u32...], "model_name"} -> {"scores": {instance: {dp_rank: tokens}}, ...}
  GET  /health, GET /workers, GET /dump
The indexer subscribes (ZMQ SUB, connect) to each registered endpoint, so publishers bind. Scores are
matched tokens: whole blocks of the query's prefix that the instance has announced, times block size.
Note: the indexer's HTTP server listens on 0.0.0.0 (this version has no option to change that); every
address this module uses is 127.0.0.1.
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any, Dict, Iterable, List, Optional, Tuple

PINNED_VERSION = "1.6.1"


def indexer_python() -> Optional[str]:
    """The interpreter that can run `-m dynamo.indexer` ($KVBLOCK_DYNAMO_PYTHON, else this one), or None."""
    py = os.environ.get("KVBLOCK_DYNAMO_PYTHON") or sys.executable
    try:
        ok = subprocess.run([py, "-c", "import dynamo.indexer"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return None
    return py if ok else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class IndexerError(RuntimeError):
    pass


class DynamoIndexer:
    """One `python -m dynamo.indexer` process on 127.0.0.1:port; stop() (or `with`) ends it."""

    def __init__(self, python: Optional[str] = None, port: Optional[int] = None, threads: int = 1,
                 startup_timeout: float = 60.0) -> None:
        found = python or indexer_python()
        if found is None:
            raise IndexerError("dynamo.indexer is not importable (pip install ai-dynamo-runtime==%s)"
                               % PINNED_VERSION)
        self.python: str = found
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.NamedTemporaryFile(prefix="dynamo-indexer-", suffix=".log", delete=False)
        env = dict(os.environ, NO_COLOR="1", RUST_LOG_STYLE="never")
        self.proc = subprocess.Popen([self.python, "-m", "dynamo.indexer", "--port", str(self.port),
                                      "--threads", str(threads)],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + startup_timeout
        while True:
            if self.proc.poll() is not None:
                raise IndexerError(f"dynamo.indexer exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self._request("GET", "/health", timeout=1)
                break
            except (OSError, IndexerError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise IndexerError(f"dynamo.indexer not answering on {self.url} after "
                                       f"{startup_timeout:.0f} s:\n{self.log_tail()}")
                time.sleep(0.05)

    def _request(self, method: str, path: str, body: Optional[Dict[str, Any]] = None, timeout: float = 10) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                text = r.read()
        except urllib.error.HTTPError as e:
            raise IndexerError(f"{method} {path}: HTTP {e.code}: {e.read().decode(errors='replace')}") from None
        return json.loads(text) if text else None

    def register(self, instance_id: int, endpoint: str, block_size: int, model_name: str = "default",
                 dp_rank: Optional[int] = None, replay_endpoint: Optional[str] = None) -> Any:
        body: Dict[str, Any] = {"instance_id": instance_id, "endpoint": endpoint, "model_name": model_name,
                "block_size": block_size}
        if dp_rank is not None:
            body["dp_rank"] = dp_rank
        if replay_endpoint:
            body["replay_endpoint"] = replay_endpoint
        return self._request("POST", "/register", body)

    def workers(self) -> List[Dict[str, Any]]:
        return self._request("GET", "/workers")

    def query(self, token_ids: Iterable[int], model_name: str = "default") -> Dict[str, Any]:
        """The raw /query answer: {"scores": {instance: {dp_rank: tokens}}, "frequencies", "instances"}."""
        ids = token_ids.tolist() if hasattr(token_ids, "tolist") else [int(t) for t in token_ids]
        return self._request("POST", "/query", {"token_ids": ids, "model_name": model_name})

    def scores(self, token_ids: Iterable[int], model_name: str = "default") -> Dict[int, int]:
        """{instance_id: matched tokens} (dp ranks summed; instances with no match are absent)."""
        out = self.query(token_ids, model_name)
        return {int(inst): sum(per_rank.values()) for inst, per_rank in out["scores"].items()}

    def tier_scores(self, token_ids: Iterable[int], model_name: str = "default") -> Dict[int, Tuple[int, int]]:
        """{instance_id: (gpu, cpu)}: the indexer's per-tier matches ("instances" of /query). gpu = tokens of
        the prefix announced with medium "GPU"; cpu = tokens of the prefix whose every block is announced on
        "GPU" or "CPU". Instances with no match on any tier are absent."""
        out = self.query(token_ids, model_name).get("instances", {})
        return {int(inst): (t.get("gpu", 0), t.get("cpu", 0)) for inst, t in out.items()
                if t.get("gpu", 0) or t.get("cpu", 0)}

    def wait_listening(self, n: int, model_name: Optional[str] = None, timeout: float = 30.0) -> None:
        """Until n registered listeners report active (their SUB sockets are connecting)."""
        deadline = time.monotonic() + timeout
        while True:
            ws = [w for w in self.workers() if model_name is None or w.get("model_name") == model_name]
            active = sum(1 for w in ws for li in w.get("listeners", {}).values() if li.get("status") == "active")
            if active >= n:
                return
            if time.monotonic() > deadline:
                raise IndexerError(f"{active} of {n} listeners active after {timeout} s: {ws}")
            time.sleep(0.02)

    def log_tail(self, n: int = 4000) -> str:
        try:
            with open(self._log.name, errors="replace") as f:
                return re.sub(r"\x1b\[[0-9;]*m", "", f.read())[-n:]
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        self._log.close()
        try:
            os.unlink(self._log.name)
        except OSError:
            pass

    def __enter__(self) -> "DynamoIndexer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
