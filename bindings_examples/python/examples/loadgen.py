"""A load generator for OpenAI-compatible servers (python -m kvblock.engine serve, vLLM, SGLang...): replays
a Mooncake-format trace as token-id prompts through streaming /v1/completions and reports time to first
token (TTFT), time per output token (TPOT), end-to-end latency (mean and percentiles) and throughput, with
an SVG chart of their distributions. --offline runs the same requests through the torch engine in this
process instead (no HTTP): the throughput the server is measured against.

Prompts: each trace hash id stands for --block-tokens tokens (the trace's 512 scaled down, so that a CPU
model serves it); token j of hash id h is a fixed function of (h, j) inside the vocabulary, so requests that
share hash ids share prompt prefixes, as in the trace. Outputs: the trace's output_length capped at
--max-output, generated to the end (ignore_eos), greedy.

Arrivals: --rate R requests/s (Poisson, seeded), or the trace's timestamps (--rate trace, x --time-scale),
or all at once (--rate inf); at most --concurrency in flight.

  python3 examples/loadgen.py --url http://127.0.0.1:8000 --limit 256 --concurrency 32 --rate inf \\
      --vocab 32000 --json out.json --chart out.svg
  python3 examples/loadgen.py --offline --model-dir DIR --limit 256 --concurrency 32 ...  (same requests)
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlparse

DEFAULT_TRACE = Path(__file__).resolve().parents[3].parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
TRACE_BLOCK = 512


@dataclass
class LoadRequest:
    arrival: float          # seconds from the start
    prompt: List[int]
    max_tokens: int


@dataclass
class Result:
    ok: bool
    prompt_tokens: int
    output_tokens: int = 0
    ttft: float = math.nan
    tpot: float = math.nan  # (last token - first token) / (tokens - 1)
    latency: float = math.nan
    error: str = ""
    events: List[float] = field(default_factory=list)


def block_tokens(h: int, n: int, vocab: int, reserved: int) -> List[int]:
    """Tokens of hash id h: a fixed pseudo-random sequence over [reserved, vocab)."""
    span = vocab - reserved
    return [reserved + (h * 1000003 + j * 7919 + (h * j) % 101) % span for j in range(n)]


def load_requests(a: argparse.Namespace) -> List[LoadRequest]:
    out: List[LoadRequest] = []
    rng = random.Random(a.seed)
    t = 0.0
    with open(a.trace) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            n = max(1, min(a.max_prompt, round(r["input_length"] * a.block_tokens / TRACE_BLOCK)))
            prompt: List[int] = []
            for h in r["hash_ids"]:
                prompt += block_tokens(h + a.namespace * 10 ** 7, a.block_tokens, a.vocab, a.reserved_tokens)
            if a.rate == "trace":
                arrival = r["timestamp"] / 1000.0 * a.time_scale
            elif a.rate == "inf":
                arrival = 0.0
            else:
                t += rng.expovariate(float(a.rate))
                arrival = t
            out.append(LoadRequest(arrival, prompt[:n], max(1, min(a.max_output, r["output_length"]))))
            if a.limit and len(out) >= a.limit:
                break
    return out


# -- the HTTP client: streaming /v1/completions on raw asyncio streams (little client CPU) --------------------
async def _read_chunked_events(reader: asyncio.StreamReader, res: Result, t0: float) -> None:
    """Reads a chunked body of server-sent events; records each token event's time and the usage."""
    buf = b""
    while True:
        size_line = await reader.readline()
        size = int(size_line.strip() or b"0", 16)
        if size == 0:
            await reader.readline()
            return
        buf += await reader.readexactly(size)
        await reader.readexactly(2)
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: "):
                continue
            data = ev[6:]
            if data == b"[DONE]":
                continue
            obj = json.loads(data)
            if "error" in obj:
                res.ok, res.error = False, str(obj["error"].get("message"))
            if obj.get("choices"):
                res.events.append(time.perf_counter() - t0)
            if obj.get("usage"):
                res.output_tokens = int(obj["usage"]["completion_tokens"])


async def send(url: str, model: Optional[str], req: LoadRequest, api_key: Optional[str]) -> Result:
    u = urlparse(url)
    body: Dict[str, Any] = {"prompt": req.prompt, "max_tokens": req.max_tokens, "temperature": 0,
                            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    data = json.dumps(body).encode()
    head = (f"POST {u.path.rstrip('/')}/v1/completions HTTP/1.1\r\nHost: {u.hostname}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n")
    if api_key:
        head += f"Authorization: Bearer {api_key}\r\n"
    res = Result(False, len(req.prompt))
    t0 = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection(u.hostname, u.port or 80)
        writer.write(head.encode() + b"\r\n" + data)
        await writer.drain()
        status = await reader.readline()
        headers = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        if b" 200 " not in status:
            res.error = status.decode().strip() + " " + (await reader.read(2000)).decode(errors="replace")
            writer.close()
            return res
        res.ok = True
        await _read_chunked_events(reader, res, t0)
        writer.close()
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        res.ok, res.error = False, f"{type(e).__name__}: {e}"
        return res
    res.latency = time.perf_counter() - t0
    if res.events:
        res.ttft = res.events[0]
        if res.output_tokens > 1:
            res.tpot = (res.events[-1] - res.events[0]) / (res.output_tokens - 1)
    return res


async def run_http(a: argparse.Namespace, reqs: Sequence[LoadRequest]) -> Tuple[List[Result], float]:
    sem = asyncio.Semaphore(a.concurrency)
    start = time.perf_counter()

    async def one(r: LoadRequest) -> Result:
        delay = r.arrival - (time.perf_counter() - start)
        if delay > 0:
            await asyncio.sleep(delay)
        async with sem:
            return await send(a.url, a.model, r, a.api_key)

    results = await asyncio.gather(*(one(r) for r in reqs))
    return list(results), time.perf_counter() - start


def run_offline(a: argparse.Namespace, reqs: Sequence[LoadRequest]) -> Tuple[List[Result], float]:
    """The same requests through the torch engine in this process, all admitted at once (arrivals ignored),
    max_num_seqs = --concurrency: its throughput only (no per-token times)."""
    import torch

    from kvblock.engine import EngineConfig, Request
    from kvblock.engine.generation import SamplingParams
    from kvblock.engine.torch_engine import TorchEngine
    from kvblock.engine.torch_model import TorchModel
    torch.set_num_threads(a.threads) if a.threads else None
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = "bfloat16" if device.startswith("cuda") else "float32"
    model = TorchModel.from_pretrained(a.model_dir, device, dtype, max_len=a.num_blocks * a.block_size)
    cfg = EngineConfig(num_blocks=a.num_blocks, block_size=a.block_size, max_num_seqs=a.concurrency,
                       max_batched_tokens=a.budget, max_steps=2 ** 62)
    eng = TorchEngine(model, cfg, cuda_graph=device.startswith("cuda"))
    for i, r in enumerate(reqs[:2]):  # warm-up
        eng.add_request(Request(10 ** 9 + i, r.prompt, 2))
    eng.run()
    eng.mgr.reset_prefix_cache()
    t0 = time.perf_counter()
    for i, r in enumerate(reqs):
        p = SamplingParams(max_tokens=r.max_tokens, temperature=0, ignore_eos=True)
        eng.add_request(Request(i, r.prompt, r.max_tokens, params=p))
    out = eng.run()
    elapsed = time.perf_counter() - t0
    results = [Result(True, len(r.prompt), len(out[i][0].output)) for i, r in enumerate(reqs)]
    eng.close()
    return results, elapsed


# -- the report ----------------------------------------------------------------------------------------------
def percentiles(xs: Sequence[float]) -> Dict[str, float]:
    v = sorted(x for x in xs if not math.isnan(x))
    if not v:
        return {}

    def q(p: float) -> float:
        return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]
    return {"mean": sum(v) / len(v), "p50": q(50), "p90": q(90), "p99": q(99), "max": v[-1]}


def summary(results: Sequence[Result], elapsed: float) -> Dict[str, Any]:
    ok = [r for r in results if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    return {"requests": len(results), "failed": len(results) - len(ok), "elapsed_s": elapsed,
            "request_throughput": len(ok) / elapsed, "output_tokens": out_tokens,
            "output_throughput": out_tokens / elapsed,
            "total_token_throughput": (out_tokens + sum(r.prompt_tokens for r in ok)) / elapsed,
            "ttft_s": percentiles([r.ttft for r in ok]), "tpot_s": percentiles([r.tpot for r in ok]),
            "latency_s": percentiles([r.latency for r in ok]),
            "errors": sorted({r.error for r in results if r.error})[:5]}


def print_summary(s: Dict[str, Any], label: str) -> None:
    print(f"{label}: {s['requests']} requests ({s['failed']} failed) in {s['elapsed_s']:.1f} s: "
          f"{s['request_throughput']:.2f} req/s, {s['output_throughput']:.0f} output tokens/s, "
          f"{s['total_token_throughput']:.0f} tokens/s with prompts")
    for name, unit in (("ttft_s", "ms"), ("tpot_s", "ms"), ("latency_s", "s")):
        p = s[name]
        if p:
            k = 1000 if unit == "ms" else 1
            print(f"  {name[:-2]:8s} " + "  ".join(f"{q} {v * k:.1f} {unit}" for q, v in p.items()))
    for e in s["errors"]:
        print(f"  error: {e}")


def svg_chart(results: Sequence[Result], title: str) -> str:
    """Three empirical CDFs side by side (TTFT, TPOT in ms; latency in s), plain SVG."""
    panels = [("TTFT (ms)", [r.ttft * 1000 for r in results if r.ok]),
              ("TPOT (ms)", [r.tpot * 1000 for r in results if r.ok]),
              ("end-to-end latency (s)", [r.latency for r in results if r.ok])]
    w, h, pad = 300, 220, 40
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{3 * w}" height="{h + 30}" font-family="sans-serif" '
             f'font-size="11"><text x="8" y="16" font-size="13">{title}</text>']
    for i, (name, xs) in enumerate(panels):
        v = sorted(x for x in xs if not math.isnan(x))
        x0, y0 = i * w + pad, 30
        pw, ph = w - pad - 10, h - pad - 10
        parts.append(f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
        parts.append(f'<text x="{x0 + pw / 2}" y="{y0 + ph + 28}" text-anchor="middle">{name}</text>')
        if not v:
            continue
        hi = v[-1] or 1.0
        pts = " ".join(f"{x0 + pw * x / hi:.1f},{y0 + ph - ph * (k + 1) / len(v):.1f}" for k, x in enumerate(v))
        parts.append(f'<polyline points="{pts}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>')
        for frac in (0.5, 0.9, 0.99):
            parts.append(f'<line x1="{x0}" x2="{x0 + pw}" y1="{y0 + ph * (1 - frac):.1f}" '
                         f'y2="{y0 + ph * (1 - frac):.1f}" stroke="#ddd"/>'
                         f'<text x="{x0 - 4}" y="{y0 + ph * (1 - frac) + 4:.1f}" text-anchor="end">p{frac * 100:g}'
                         f'</text>')
        parts.append(f'<text x="{x0}" y="{y0 + ph + 13}">0</text><text x="{x0 + pw}" y="{y0 + ph + 13}" '
                     f'text-anchor="end">{hi:.3g}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--model", default=None, help="the model field of requests (default: none sent)")
    p.add_argument("--api-key", default=None)
    p.add_argument("--trace", default=str(DEFAULT_TRACE))
    p.add_argument("--limit", type=int, default=256, help="first N requests of the trace (0: all)")
    p.add_argument("--rate", default="inf", help="requests/s (Poisson), 'trace' (its timestamps) or 'inf'")
    p.add_argument("--time-scale", type=float, default=1.0, help="with --rate trace: multiply timestamps")
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight at most")
    p.add_argument("--block-tokens", type=int, default=32, help="prompt tokens per trace hash id")
    p.add_argument("--max-prompt", type=int, default=1024)
    p.add_argument("--max-output", type=int, default=64)
    p.add_argument("--vocab", type=int, default=32000, help="the served model's vocabulary size")
    p.add_argument("--reserved-tokens", type=int, default=16, help="token ids below this are never used")
    p.add_argument("--seed", type=int, default=0, help="of the Poisson arrivals")
    p.add_argument("--namespace", type=int, default=0,
                   help="another N gives other prompts with the same sharing (a server's cache stays cold)")
    p.add_argument("--json", help="write the summary and every request's record here")
    p.add_argument("--chart", help="write an SVG chart of TTFT / TPOT / latency distributions here")
    g = p.add_argument_group("--offline: the torch engine in this process")
    g.add_argument("--offline", action="store_true")
    g.add_argument("--model-dir")
    g.add_argument("--device", default=None)
    g.add_argument("--num-blocks", type=int, default=1024)
    g.add_argument("--block-size", type=int, default=16)
    g.add_argument("--budget", type=int, default=512)
    g.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    a = p.parse_args(argv)
    if a.rate not in ("inf", "trace"):
        try:
            if float(a.rate) <= 0:
                raise ValueError
        except ValueError:
            p.error(f"--rate {a.rate}: a positive number, 'trace' or 'inf'")
    reqs = load_requests(a)
    if a.offline:
        if not a.model_dir:
            p.error("--offline needs --model-dir")
        results, elapsed = run_offline(a, reqs)
        label = f"offline engine ({a.concurrency} sequences at most)"
    else:
        results, elapsed = asyncio.run(run_http(a, reqs))
        label = f"{a.url} ({a.concurrency} concurrent streams, rate {a.rate})"
    s = summary(results, elapsed)
    print_summary(s, label)
    if a.json:
        Path(a.json).write_text(json.dumps({"summary": s, "args": vars(a),
                                            "requests": [asdict(r) for r in results]}, indent=1))
    if a.chart:
        Path(a.chart).write_text(svg_chart(results, label))
    return s


if __name__ == "__main__":
    main()
