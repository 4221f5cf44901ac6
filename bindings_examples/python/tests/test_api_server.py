"""The OpenAI-compatible server (python -m kvblock.engine serve) started here on a free port with a tiny random
checkpoint, tokenizer and chat template written here: the official `openai` client (completions and chat,
streamed and not) gets what the engine generates offline on the same prompts; raw HTTP checks malformed
bodies (400 naming the field), the API key, a client leaving mid-stream (its samples aborted), a full queue
(429), and that none of it stops the server. Without fastapi / uvicorn / openai / torch these SKIP, visibly."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

MISSING = []
for mod in ("fastapi", "uvicorn", "openai", "torch", "safetensors", "tokenizers", "jinja2"):
    try:
        __import__(mod)
    except Exception as e:  # ImportError, or a torch whose CUDA libraries are missing
        MISSING.append(f"{mod} ({type(e).__name__})")
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"SKIP server tests: missing {', '.join(MISSING)}")

PKG = Path(__file__).resolve().parent.parent
KEY = "test-key"


class Server:
    def __init__(self, model_dir: Path, *args: str) -> None:
        self.model_dir = model_dir
        env = dict(os.environ, PYTHONPATH=str(PKG) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "kvblock.engine", "serve", "--model", str(model_dir),
                                      "--port", "0", "--device", "cpu", "--block-size", "8", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        seen = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            m = re.search(r"on http://([\d.]+):(\d+)", line)
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                self.url = f"http://{self.host}:{self.port}"
                return
        self.proc.kill()
        raise RuntimeError("the server did not start:\n" + "".join(seen))

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def request(self, method: str, path: str, body: object = None, raw: bytes = None, key: str = KEY) -> tuple:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metrics(self) -> dict:
        _, text = self.request("GET", "/metrics")
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, v = line.rsplit(" ", 1)
                out[re.sub(r'model_name="[^"]*",?', "", name).replace("{}", "")] = float(v)
        return out

    def open_stream(self, body: dict, until: bytes = b"data:") -> socket.socket:
        """A streaming completion on a raw socket, returned once `until` arrived (its first event, or the end
        of the headers)."""
        s = socket.create_connection((self.host, self.port), timeout=120)
        data = json.dumps(dict(body, stream=True)).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(data) + data)
        got = b""
        while until not in got:
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
        assert got.startswith(b"HTTP/1.1 200"), got
        return s


def wait_for(cond, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from serving_helpers import write_servable
    d, _ = write_servable(tmp_path_factory.mktemp("ckpt") / "tiny", eos=(1,))
    return d


@pytest.fixture(scope="module")
def server(model_dir):
    s = Server(model_dir, "--num-blocks", "128", "--max-seqs", "8", "--api-key", KEY)
    yield s
    s.close()


@pytest.fixture(scope="module")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def offline(model_dir: Path, prompt_ids, **params) -> tuple:
    """(output ids, text, finish reason) of the engine run in this process, greedy."""
    from kvblock.engine import EngineConfig, Request
    from kvblock.engine.checkpoint import load_tokenizer
    from kvblock.engine.generation import Generation, SamplingParams, eos_token_ids
    from kvblock.engine.torch_engine import TorchEngine
    from kvblock.engine.torch_model import TorchModel
    model = TorchModel.from_pretrained(str(model_dir), "cpu", "float32", max_len=1024)
    eng = TorchEngine(model, EngineConfig(num_blocks=128, block_size=8), cuda_graph=False)
    eng.generation = Generation(eos_token_ids(str(model_dir)), load_tokenizer(str(model_dir)))
    p = SamplingParams(temperature=0, **params)
    eng.add_request(Request(0, list(prompt_ids), p.max_tokens, params=p))
    s = eng.run()[0][0]
    return s.output, s.text.text, s.finish_reason


def tokenize(model_dir: Path, text: str) -> list:
    from kvblock.engine.checkpoint import load_tokenizer
    return load_tokenizer(str(model_dir)).encode(text, add_special_tokens=False).ids


def test_completions_streamed_and_not_match_the_engine(server, client, model_dir) -> None:
    prompt = "w10 w20 w30 w40 w50"
    ids, text, reason = offline(model_dir, tokenize(model_dir, prompt), max_tokens=24)
    r = client.completions.create(model="tiny", prompt=prompt, max_tokens=24, temperature=0)
    assert r.choices[0].text == text and r.choices[0].finish_reason == reason
    assert r.usage.completion_tokens == len(ids) and r.usage.prompt_tokens == 5
    chunks = list(client.completions.create(model="tiny", prompt=prompt, max_tokens=24, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == reason
    assert chunks[-1].usage.completion_tokens == len(ids)
    by_ids = client.completions.create(model="tiny", prompt=tokenize(model_dir, prompt), max_tokens=24,
                                       temperature=0)
    assert by_ids.choices[0].text == text


def test_chat_streamed_and_not_use_the_chat_template(server, client, model_dir) -> None:
    msgs = [{"role": "system", "content": "w7"}, {"role": "user", "content": "w9 w11"}]
    rendered = "<s><|system|> w7 <|end|> <|user|> w9 w11 <|end|> <|assistant|>"
    ids, text, reason = offline(model_dir, tokenize(model_dir, rendered), max_tokens=20, min_tokens=3)
    r = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=20, temperature=0,
                                       extra_body={"min_tokens": 3})
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == text and r.choices[0].finish_reason == reason
    assert r.usage.prompt_tokens == len(tokenize(model_dir, rendered))
    chunks = list(client.chat.completions.create(model="tiny", messages=msgs, max_tokens=20, temperature=0,
                                                 stream=True, extra_body={"min_tokens": 3}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text


def test_sampling_seed_n_logprobs_and_stop(server, client, model_dir) -> None:
    kw = dict(model="tiny", prompt="w3 w4 w5", max_tokens=12, temperature=1.0, top_p=0.9, n=3, seed=1234,
              logprobs=2, extra_body={"top_k": 40, "ignore_eos": True})
    a, b = client.completions.create(**kw), client.completions.create(**kw)
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    assert sorted(c.index for c in a.choices) == [0, 1, 2]
    assert len({c.text for c in a.choices}) > 1
    lp = a.choices[0].logprobs
    assert len(lp.tokens) == 12 and all(len(t) == 2 for t in lp.top_logprobs)
    assert all(v <= 0 for v in lp.token_logprobs)
    words = a.choices[0].text.split()
    stop = " ".join(words[4:6])
    c = client.completions.create(**dict(kw, n=1, stop=[stop], logprobs=None))
    assert c.choices[0].finish_reason == "stop" and stop not in c.choices[0].text
    assert c.choices[0].text == a.choices[0].text[:a.choices[0].text.index(stop)]
    ch = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "w8"}], max_tokens=4,
                                        temperature=0, logprobs=True, top_logprobs=3)
    assert len(ch.choices[0].logprobs.content[0].top_logprobs) == 3


def test_models_health_metrics(server, client) -> None:
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert server.request("GET", "/health", key="") == (200, '{"status":"ok"}')
    client.completions.create(model="tiny", prompt="w10 w20 w30 w40 w50 w60 w70 w80 w90", max_tokens=2)
    client.completions.create(model="tiny", prompt="w10 w20 w30 w40 w50 w60 w70 w80 w91", max_tokens=2)
    m = server.metrics()
    assert m["kvblock_time_to_first_token_seconds_count"] >= 2
    assert m["kvblock_generation_tokens_total"] >= 4
    assert m['kvblock_prefix_cache_hits_total{tier="device"}'] >= 8  # the shared first block
    assert 0 < m['kvblock_prefix_cache_hit_rate{tier="all"}'] <= 1
    for name in ("kvblock_num_requests_running", "kvblock_num_requests_waiting", "kvblock_num_preemptions_total",
                 "kvblock_generation_tokens_per_second"):
        assert name in m


@pytest.mark.parametrize("path,body,status,field", [
    ("/v1/completions", b"{not json", 400, "body"),
    ("/v1/completions", b"[1, 2]", 400, "body"),
    ("/v1/completions", {"prompt": "w1", "temperature": "hot"}, 400, "temperature"),
    ("/v1/completions", {"prompt": "w1", "max_tokens": -3}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "w1", "max_tokens": 10 ** 9}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": [1, 99999]}, 400, "prompt"),
    ("/v1/completions", {"prompt": None}, 400, "prompt"),
    ("/v1/completions", {"prompt": "w1", "top_p": 1.5}, 400, "top_p"),
    ("/v1/completions", {"prompt": "w1", "n": 0}, 400, "n"),
    ("/v1/completions", {"prompt": "w1", "stop": 5}, 400, "stop"),
    ("/v1/completions", {"prompt": "w1", "stop_token_ids": 5}, 400, "stop_token_ids"),
    ("/v1/completions", {"prompt": "w1", "stop_token_ids": -1.5}, 400, "stop_token_ids"),
    ("/v1/completions", {"prompt": "w1", "stop_token_ids": 0}, 400, "stop_token_ids"),
    ("/v1/completions", {"prompt": "w1", "stop_token_ids": {}}, 400, "stop_token_ids"),
    ("/v1/completions", {"prompt": "w1", "stop_token_ids": [1, 99999]}, 400, "stop_token_ids"),
    ("/v1/completions", {"prompt": "w1", "logprobs": 99}, 400, "logprobs"),
    ("/v1/completions", {"prompt": "w1", "seed": -1}, 400, "seed"),
    ("/v1/completions", {"prompt": "w1", "model": "other"}, 404, "model"),
    ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "w1"}]}, 400, "messages[0].role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 7}]}, 400, "messages[0].content"),
])
def test_malformed_requests_get_the_field_named(server, path, body, status, field) -> None:
    raw = body if isinstance(body, bytes) else None
    code, text = server.request("POST", path, None if raw else body, raw=raw)
    err = json.loads(text).get("error", {})
    assert code == status and err["param"] == field and field in err["message"], text
    assert server.request("GET", "/health")[0] == 200


# Values of every JSON type, out-of-range numbers and shapes of the other fields, for the random bodies below.
JUNK = [None, True, False, 0, 1, -1, 3, 255, 10 ** 6, 2 ** 63, -2 ** 63, 1e308, float("nan"), float("inf"), -0.0, 0.5,
        1.5, "", "w1", "w1 w2", "\x00", "x" * 3000, [], [1], [1, 2, 3], [[1, 2], [3]], ["w1", "w2"], [-1], [2 ** 40],
        [1.5], [None], {}, {"a": 1}, [{"role": "user", "content": "w1"}], [{"role": "user"}],
        [{"role": "user", "content": [{"type": "text", "text": "w2"}]}], [{"role": "user", "content": None}]]
FIELDS = ["prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "n", "stop",
          "seed", "logprobs", "top_logprobs", "stream", "stream_options", "echo", "best_of", "presence_penalty",
          "frequency_penalty", "logit_bias", "user", "model", "suffix", "ignore_eos", "min_tokens", "stop_token_ids",
          "response_format", "tools"]


def _answered(server, path: str, body: dict) -> None:
    code, text = server.request("POST", path, raw=json.dumps(body).encode())
    assert code in (200, 400, 404, 413, 422), (path, body, text)
    if code != 200:
        assert json.loads(text)["error"]["message"], (path, body, text)


def test_any_value_of_any_field_gets_an_answer_never_a_server_error(server) -> None:
    """Every field with every junk value, alone on a valid request, then seeded random bodies of several: each
    gets 200 or a 4xx with a message, never a 5xx, and the server keeps serving."""
    import random
    for path, base in (("/v1/completions", {"prompt": "w1"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "w1"}]})):
        for field in FIELDS:
            for v in JUNK:
                _answered(server, path, {**base, "max_tokens": 1, field: v})
    rng = random.Random(7)
    for _ in range(100):
        path = rng.choice(["/v1/completions", "/v1/chat/completions"])
        body = {("messages" if "chat" in path else "prompt"): rng.choice(JUNK)} if rng.random() < 0.8 else {}
        body.update({k: rng.choice(JUNK) for k in rng.sample(FIELDS, rng.randint(0, 6))})
        body.setdefault("max_tokens", rng.randint(1, 3))
        _answered(server, path, body)
    assert server.request("GET", "/health")[0] == 200


def test_api_key(server) -> None:
    assert server.request("POST", "/v1/completions", {"prompt": "w1"}, key="wrong")[0] == 401
    assert server.request("GET", "/v1/models", key="")[0] == 401
    assert server.request("POST", "/v1/completions", {"prompt": "w1", "max_tokens": 1})[0] == 200


def test_garbage_does_not_stop_the_server(server) -> None:
    for junk in (b"\x00\xff" * 1000, b"GET / HTTP/9.9\r\n\r\n", b"POST /v1/completions HTTP/1.1\r\nContent-Length: "
                 b"99999999999\r\n\r\n{"):
        with socket.create_connection((server.host, server.port), timeout=30) as s:
            s.sendall(junk)
            s.settimeout(5)
            try:
                s.recv(1024)
            except OSError:
                pass
    assert server.request("GET", "/health")[0] == 200


@pytest.fixture(scope="module")
def small_server(model_dir):
    s = Server(model_dir, "--num-blocks", "512", "--max-seqs", "1", "--max-queue", "1")
    yield s
    s.close()


def test_disconnect_aborts_and_a_full_queue_answers_429(small_server) -> None:
    srv = small_server
    long = {"prompt": "w5 w6", "max_tokens": 2000, "ignore_eos": True, "temperature": 0}
    first = srv.open_stream(long)  # running (--max-seqs 1)
    second = srv.open_stream(dict(long, prompt="w7 w8"), until=b"\r\n\r\n")  # accepted, waiting
    code, text = srv.request("POST", "/v1/completions", {"prompt": "w9", "max_tokens": 2})
    assert code == 429 and json.loads(text)["error"]["type"] == "rate_limit_error"
    first.close()
    second.close()
    wait_for(lambda: srv.metrics()['kvblock_request_success_total{finished_reason="abort"}'] >= 2, "the aborts")
    wait_for(lambda: srv.metrics()["kvblock_num_requests_running"] == 0, "no request running")
    m = srv.metrics()
    assert m['kvblock_requests_rejected_total{status="429"}'] == 1
    assert m["kvblock_generation_tokens_total"] < 4000  # both stopped well before its max_tokens
    code, text = srv.request("POST", "/v1/completions", {"prompt": "w9", "max_tokens": 2})
    assert code == 200, text


def test_load_generator_replays_a_trace(server, tmp_path) -> None:
    """examples/loadgen.py against the server: every request streams its max_tokens; the offline engine
    generates as many on the same requests."""
    import loadgen
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 10 * i, "input_length": 40 + 300 * (i % 3),
                                         "output_length": 5 + i, "hash_ids": [0, 1 + i % 2, 7 + i]}) + "\n"
                             for i in range(6)))
    common = ["--trace", str(trace), "--vocab", "256", "--reserved-tokens", "5", "--block-tokens", "8",
              "--max-output", "8", "--concurrency", "3"]
    chart = tmp_path / "c.svg"
    s = loadgen.main(common + ["--url", server.url, "--api-key", KEY, "--rate", "trace", "--time-scale", "0.01",
                               "--json", str(tmp_path / "r.json"), "--chart", str(chart)])
    assert s["failed"] == 0 and s["output_tokens"] == sum(min(8, 5 + i) for i in range(6))
    assert s["ttft_s"]["p50"] > 0 and s["tpot_s"]["p99"] >= s["tpot_s"]["p50"] > 0
    assert chart.read_text().startswith("<svg") and "TTFT" in chart.read_text()
    rec = json.loads((tmp_path / "r.json").read_text())["requests"]
    assert [r["prompt_tokens"] for r in rec] == [min(24, round((40 + 300 * (i % 3)) * 8 / 512)) or 1
                                                 for i in range(6)]
    off = loadgen.main(common + ["--offline", "--model-dir", str(server.model_dir), "--device", "cpu",
                                 "--num-blocks", "64", "--block-size", "8"])
    assert off["output_tokens"] == s["output_tokens"]


def test_a_failed_step_fails_its_requests_and_the_engine_is_rebuilt(model_dir) -> None:
    """serving_loop.EngineLoop in this process: the first engine's step raises; its request gets the error,
    a fresh engine serves the next one, and the loop's thread keeps running."""
    import asyncio

    from kvblock.engine import EngineConfig
    from kvblock.engine.generation import Generation, SamplingParams
    from kvblock.engine.server_metrics import ServerMetrics
    from kvblock.engine.serving_loop import EngineLoop
    from kvblock.engine.torch_engine import TorchEngine
    from kvblock.engine.torch_model import TorchModel
    model = TorchModel.from_pretrained(str(model_dir), "cpu", "float32", max_len=256)
    made = []

    def make() -> TorchEngine:
        eng = TorchEngine(model, EngineConfig(num_blocks=32, block_size=8), cuda_graph=False)
        eng.generation = Generation((1,))
        if not made:
            def boom() -> None:
                raise RuntimeError("boom")
            eng.step = boom
        made.append(eng)
        return eng

    loop = EngineLoop(make, 4, ServerMetrics("t"))
    loop.start()
    p = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True)

    async def go() -> list:
        h = loop.submit([[5, 6, 7]], p, asyncio.get_running_loop())[0]
        u = await asyncio.wait_for(h.updates.get(), 60)
        assert u.error is not None and "boom" in u.error
        h = loop.submit([[5, 6, 7]], p, asyncio.get_running_loop())[0]
        tokens = []
        while True:
            u = await asyncio.wait_for(h.updates.get(), 60)
            tokens += u.token_ids
            if u.finish_reason:
                return tokens

    try:
        assert len(asyncio.run(go())) == 3
        assert loop.alive and len(made) == 2 and loop.metrics.engine_restarts == 1
    finally:
        loop.stop()


def test_a_bad_checkpoint_is_one_line_and_a_nonzero_exit(tmp_path) -> None:
    env = dict(os.environ, PYTHONPATH=str(PKG) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "kvblock.engine", "serve", "--model", str(tmp_path / "none"),
                        "--port", "0", "--threads", "1"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode != 0 and "config.json" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_request_gauges_count_requests_not_samples() -> None:
    """n = 3 samples of one request count once; a request with a sample running is running, whatever its
    other samples do."""
    from types import SimpleNamespace

    from kvblock.engine.server_metrics import request_counts
    a, b, c, d = (SimpleNamespace(id=i) for i in range(4))
    samples = lambda r, k: [SimpleNamespace(request=r) for _ in range(k)]  # noqa: E731
    assert request_counts(samples(a, 3), [], []) == (1, 0, 0)
    assert request_counts(samples(a, 2), samples(a, 1) + samples(b, 2), samples(c, 1)) == (1, 1, 1)
    assert request_counts([], samples(d, 2), samples(d, 1) + samples(c, 2)) == (0, 1, 1)
