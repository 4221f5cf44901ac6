"""The torch engine as a newcomer meets it: the README's snippet runs as written on a CPU, the CLI's --threads
sets torch's (and the BLAS's) thread count, and a sliding-window checkpoint serves prompts longer than its
block pool, token for token as with a pool that holds them whole."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="SKIP torch engine: torch not importable")
pytest.importorskip("safetensors", reason="SKIP torch engine: safetensors not importable")

PKG = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(PKG) + os.pathsep + os.environ.get("PYTHONPATH", ""), CUDA_VISIBLE_DEVICES="")


def readme_torch_snippet() -> str:
    """The README's ```python block that builds a TorchEngine."""
    blocks = re.findall(r"```python\n(.*?)```", (PKG / "README.md").read_text(), re.S)
    found = [b for b in blocks if "TorchEngine(" in b]
    assert len(found) == 1, f"{len(found)} README python blocks build a TorchEngine"
    return found[0]


def test_readme_snippet_runs_as_written_on_a_cpu(tmp_path) -> None:
    code = readme_torch_snippet()
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\[\d+(, \d+){15}\]", out), r.stdout


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvblock.engine", *args], env=ENV, capture_output=True, text=True,
                          timeout=300)


def test_cli_threads_sets_torch_threads(tmp_path) -> None:
    from kvblock.engine.checkpoint import write_tiny_checkpoint
    d, _ = write_tiny_checkpoint(str(tmp_path / "m"), "llama", num_layers=1)
    r = cli("--model", str(d), "--ids", "5,9,300,7", "--max-tokens", "4", "--num-blocks", "32", "--threads", "3")
    assert r.returncode == 0, r.stderr[-2000:]
    assert ", 3 torch threads" in r.stdout and "request 0 sample 0: ids [" in r.stdout, r.stdout
    r = cli("--model", str(d), "--ids", "5", "--threads", "0")
    assert r.returncode == 2 and "--threads: must be >= 1, got 0" in r.stderr
    r = cli("--requests", "1", "--threads", "2")
    assert r.returncode == 2 and "--threads: for the torch engine" in r.stderr


def test_window_prompt_longer_than_the_pool(tmp_path) -> None:
    """A Mistral checkpoint with a 16-token window: prompts of about 3x a 10-block pool are served and give
    the same tokens as a pool that holds every prompt whole (the engine's own parity with transformers on
    windowed models is test_engine_torch.py's)."""
    import json

    import numpy as np

    from kvblock.engine import EngineConfig, Request
    from kvblock.engine.checkpoint import write_tiny_checkpoint
    from kvblock.engine.torch_engine import TorchEngine
    from kvblock.engine.torch_model import TorchModel
    d, cfg = write_tiny_checkpoint(str(tmp_path / "w"), "mistral", num_layers=1, seed=7)
    c = json.loads((d / "config.json").read_text())
    c["sliding_window"] = 16
    (d / "config.json").write_text(json.dumps(c))
    model = TorchModel.from_pretrained(str(d), "cpu", "float32", max_len=512)
    rng = np.random.default_rng(1)
    shared = rng.integers(0, cfg.vocab, 200).tolist()
    prompts = [shared + rng.integers(0, cfg.vocab, 13 * i + 3).tolist() for i in range(3)]

    def run(num_blocks: int) -> list:
        eng = TorchEngine(model, EngineConfig(num_blocks=num_blocks, block_size=8, max_num_seqs=4,
                                              max_batched_tokens=16), cuda_graph=False)
        for i, p in enumerate(prompts):
            eng.add_request(Request(i, p, 5))
        out = eng.run()
        eng.mgr.check_invariants()
        eng.close()
        return [out[i][0].output for i in range(len(prompts))]

    assert all(len(p) > 2.5 * 10 * 8 for p in prompts)
    assert run(10) == run(128)
