"""python -m kvblock.engine serve --model DIR [--port N]: the torch engine as an OpenAI-compatible server
(FastAPI on uvicorn). /v1/completions and /v1/chat/completions (the checkpoint's chat template), streamed as
server-sent events or not; /v1/models; /health; /metrics (Prometheus text). The engine steps in its own
thread (serving_loop.py) while requests arrive; a client that disconnects has its samples aborted and their
blocks freed; more requests than --max-seqs running + --max-queue waiting are answered 429; a malformed one
400 with the field named. It listens on 127.0.0.1 unless --host says otherwise; with --api-key (or
KVBLOCK_API_KEY) the /v1 routes need `Authorization: Bearer KEY`."""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import time
from typing import Any, AsyncIterator, Callable, Dict, List, Optional

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .generation import ParamError
from .protocol import (
    ApiRequest,
    ServedModel,
    choice,
    envelope,
    error_body,
    logprobs_json,
    parse_chat,
    parse_completion,
    usage,
)
from .serve import _threads
from .serving_loop import EngineLoop, Handle, QueueFull, Update

MAX_BODY_BYTES = 8 << 20
DISCONNECT_POLL_S = 0.5


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: Optional[str] = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind


def create_app(engine: EngineLoop, served: ServedModel, api_key: Optional[str] = None) -> FastAPI:
    app = FastAPI(title="kvblock engine", docs_url=None, redoc_url=None, openapi_url=None)
    metrics = engine.metrics

    def error(e: ApiError) -> JSONResponse:
        if e.status >= 400 and e.status != 400:
            metrics.rejected[str(e.status)] += 1
        return JSONResponse(error_body(e.message, e.kind, e.param, e.status), status_code=e.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        return error(ApiError(e.status_code, str(e.detail), kind="not_found_error" if e.status_code == 404
                              else "invalid_request_error"))

    @app.exception_handler(Exception)
    async def internal_error(_: Request, e: Exception) -> JSONResponse:
        logging.getLogger("kvblock.server").exception("request failed")
        return error(ApiError(500, f"internal error: {type(e).__name__}", kind="internal_error"))

    def authorize(request: Request) -> None:
        if api_key is None:
            return
        if request.headers.get("authorization", "") != f"Bearer {api_key}":
            raise ApiError(401, "a valid API key is needed: Authorization: Bearer KEY", kind="authentication_error")

    async def read_json(request: Request) -> Any:
        size = request.headers.get("content-length", "")
        if size.isdigit() and int(size) > MAX_BODY_BYTES:
            raise ApiError(413, f"the request body is over {MAX_BODY_BYTES} bytes", "body")
        chunks: List[bytes] = []
        total = 0
        async for c in request.stream():
            total += len(c)
            if total > MAX_BODY_BYTES:
                raise ApiError(413, f"the request body is over {MAX_BODY_BYTES} bytes", "body")
            chunks.append(c)
        try:
            return json.loads(b"".join(chunks))
        except (ValueError, RecursionError) as e:
            raise ApiError(400, f"the request body is not valid JSON: {str(e)[:200]}", "body") from None

    async def generate(request: Request, parse: Callable[[Any, ServedModel], ApiRequest]) -> Any:
        try:
            authorize(request)
            body = await read_json(request)
            try:
                r = parse(body, served)
            except ParamError as e:
                raise ApiError(400, e.message if e.param in e.message else f"{e.param}: {e.message}", e.param)
            except LookupError as e:
                raise ApiError(404, str(e), "model", kind="not_found_error")
            try:
                handles = engine.submit(r.prompts, r.params, asyncio.get_running_loop())
            except QueueFull as e:
                raise ApiError(429, f"the server is busy ({e}); retry later", kind="rate_limit_error")
        except ApiError as e:
            return error(e)
        if r.stream:
            return StreamingResponse(stream(request, r, handles), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return await complete(request, r, handles)

    async def updates(request: Request, handles: List[Handle]) -> AsyncIterator[Update]:
        """Every update of the request's samples until all finished; aborts them if the client leaves first
        (or this is cancelled)."""
        left = sum(h.params.n for h in handles)
        q = handles[0].updates
        try:
            while left:
                try:
                    u = await asyncio.wait_for(q.get(), DISCONNECT_POLL_S)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        return
                    continue
                if u.error is not None:
                    left = 0
                elif u.finish_reason is not None:
                    left -= 1
                yield u
        finally:
            if left:
                engine.abort(handles)

    async def complete(request: Request, r: ApiRequest, handles: List[Handle]) -> Any:
        n = r.params.n
        texts: Dict[int, List[str]] = {}
        lps: Dict[int, list] = {}
        finish: Dict[int, Optional[str]] = {}
        tokens = 0
        async for u in updates(request, handles):
            if u.error is not None:
                return error(ApiError(500, u.error, kind="internal_error"))
            i = u.prompt * n + u.index
            texts.setdefault(i, []).append(u.text)
            lps.setdefault(i, []).extend(u.logprobs)
            tokens += len(u.token_ids)
            if u.finish_reason is not None:
                finish[i] = u.finish_reason
        if len(finish) < n * len(handles):  # the client left
            return error(ApiError(499, "client disconnected"))
        body = envelope(r, served.name, chunk=False)
        body["choices"] = [choice(r, i, "".join(texts[i]), logprobs_json(lps[i], served.generation, r.chat)
                                  if r.params.logprobs is not None else None, finish[i], chunk=False)
                           for i in sorted(finish)]
        body["usage"] = usage(sum(h.prompt_len for h in handles), tokens)
        return JSONResponse(body)

    async def stream(request: Request, r: ApiRequest, handles: List[Handle]) -> AsyncIterator[bytes]:
        n = r.params.n
        started: set = set()
        offsets: Dict[int, int] = {}
        tokens = 0

        def event(obj: Any) -> bytes:
            return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"

        async for u in updates(request, handles):
            if u.error is not None:
                yield event(error_body(u.error, "internal_error", code=500))
                break
            i = u.prompt * n + u.index
            tokens += len(u.token_ids)
            first = i not in started
            if not (u.text or u.token_ids or u.finish_reason or first):
                continue
            started.add(i)
            lp = None
            if r.params.logprobs is not None:
                lp = logprobs_json(u.logprobs, served.generation, r.chat, offsets.get(i, 0))
                offsets[i] = offsets.get(i, 0) + len(u.text)
            chunk = envelope(r, served.name, chunk=True)
            chunk["choices"] = [choice(r, i, u.text, lp, u.finish_reason, chunk=True, first=first)]
            yield event(chunk)
        else:
            if r.include_usage:
                chunk = envelope(r, served.name, chunk=True)
                chunk["choices"] = []
                chunk["usage"] = usage(sum(h.prompt_len for h in handles), tokens)
                yield event(chunk)
        yield b"data: [DONE]\n\n"

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await generate(request, parse_completion)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        return await generate(request, parse_chat)

    @app.get("/v1/models")
    async def models(request: Request) -> Any:
        try:
            authorize(request)
        except ApiError as e:
            return error(e)
        return {"object": "list", "data": [{"id": served.name, "object": "model", "created": int(started_at),
                                             "owned_by": "kvblock", "max_model_len": served.max_len}]}

    @app.get("/health")
    async def health() -> Any:
        if not engine.alive:
            return JSONResponse({"status": "engine stopped"}, status_code=503)
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus() -> Any:
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    started_at = time.time()
    return app


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="DIR", help="Hugging Face format checkpoint directory")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    p.add_argument("--port", type=int, default=8000, help="0: a free port (printed)")
    p.add_argument("--api-key", default=os.environ.get("KVBLOCK_API_KEY"),
                   help="the /v1 routes need Authorization: Bearer KEY (default: $KVBLOCK_API_KEY, else none)")
    p.add_argument("--served-model-name", help="the model's name in the API (default: the directory's name)")
    p.add_argument("--max-queue", type=int, default=256, help="requests waiting beyond --max-seqs before 429")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--dtype", default=None, choices=["float32", "float16", "bfloat16"])
    p.add_argument("--num-blocks", type=int, default=1024)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-seqs", type=int, default=64)
    p.add_argument("--budget", type=int, default=512, help="tokens per step (decode + prefill chunks)")
    p.add_argument("--max-model-len", type=int, default=None,
                   help="prompt + generated tokens at most (default: the pool's tokens or the checkpoint's "
                        "max_position_embeddings, whichever is less)")
    p.add_argument("--preemption", choices=["recompute", "swap"], default="recompute")
    p.add_argument("--host-blocks", type=int, default=0)
    p.add_argument("--host-cache", action="store_true")
    p.add_argument("--store", metavar="SPEC", help="store tier below the host cache: dir:PATH or redis://...")
    p.add_argument("--kv-events", metavar="ENDPOINT",
                   help="publish KV events (vLLM's format), e.g. tcp://127.0.0.1:5557 (tcp://*:N binds every "
                        "interface; events carry prompt token ids)")
    p.add_argument("--kv-events-replay", metavar="ENDPOINT")
    p.add_argument("--kv-events-topic", default="")
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--no-cuda-graph", action="store_true")
    p.add_argument("--threads", type=_threads, default=0, metavar="N",
                   help="CPU threads of torch and of numpy's BLAS (default: theirs)")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])


def build(a: argparse.Namespace) -> tuple:
    """(EngineLoop, ServedModel) for the parsed arguments: the checkpoint loaded once, engines made from it."""
    import torch

    from .chat_template import ChatTemplate
    from .checkpoint import CheckpointError, checkpoint_id, load_tokenizer
    from .engine import EngineConfig
    from .generation import Generation, eos_token_ids
    from .serve import torch_placement
    from .server_metrics import ServerMetrics
    from .torch_engine import TorchEngine
    from .torch_model import TorchModel
    device, dtype = torch_placement(a, torch)
    max_len = a.num_blocks * a.block_size
    if a.max_model_len:
        max_len = min(max_len, a.max_model_len)
    try:
        model = TorchModel.from_pretrained(a.model, device, dtype, max_len=max_len)
    except (CheckpointError, FileNotFoundError) as e:
        raise SystemExit(f"serve: {e}") from None
    generation = Generation(eos_token_ids(a.model), load_tokenizer(a.model))
    name = a.served_model_name or os.path.basename(os.path.normpath(a.model))
    cfg = EngineConfig(num_blocks=a.num_blocks, block_size=a.block_size, num_host_blocks=a.host_blocks,
                       host_cache=a.host_cache, max_num_seqs=a.max_seqs, max_batched_tokens=a.budget,
                       preemption=a.preemption, prefix_caching=not a.no_prefix_caching,
                       kv_events_endpoint=a.kv_events, kv_events_replay_endpoint=a.kv_events_replay,
                       kv_events_topic=a.kv_events_topic, store=a.store,
                       store_model_id=checkpoint_id(a.model) if a.store else None, max_steps=2 ** 62)

    def make_engine() -> Any:
        eng = TorchEngine(model, cfg, cuda_graph=not a.no_cuda_graph)
        eng.generation = generation
        return eng

    served = ServedModel(name, model.cfg.vocab, model.max_len, generation, ChatTemplate.from_checkpoint(a.model))
    return EngineLoop(make_engine, a.max_seqs + a.max_queue, ServerMetrics(name)), served


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    return sock


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(prog="python -m kvblock.engine serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    a = p.parse_args(argv)
    if a.max_queue < 0:
        p.error("--max-queue must be >= 0")
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    loop, served = build(a)
    app = create_app(loop, served, a.api_key)
    sock = listen(a.host, a.port)
    host, port = sock.getsockname()[:2]
    loop.start()
    print(f"kvblock server: {served.name} on http://{host}:{port} (max_model_len {served.max_len}, "
          f"{a.max_seqs} running + {a.max_queue} waiting at most)", flush=True)
    config = uvicorn.Config(app, log_level=a.log_level, access_log=a.log_level in ("debug", "info"),
                            limit_concurrency=4 * (a.max_seqs + a.max_queue) + 64, timeout_graceful_shutdown=5)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        loop.stop()
