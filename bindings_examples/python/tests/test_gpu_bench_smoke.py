"""tools/gpu/bench_torch.py, the GPU run's comparison with torch, has to work the first time it meets a GPU
(GPU time is scarce): its --cpu-smoke mode runs every kind of row through the same code (paged cache
behind random block tables, libkvblock's kernel, the fp32 reference check, the table) on the CPU kernels.
Needs torch; skipped without it."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[3] / "tools" / "gpu" / "bench_torch.py"


def _run(tmp_path, *extra_env, args=("--cpu-smoke",)):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    env.update(dict(extra_env))
    out = tmp_path / "table.md"
    r = subprocess.run([sys.executable, str(BENCH), *args, "--out", str(out)], env=env,
                       capture_output=True, text=True, timeout=600)
    return r, out.read_text() if out.exists() else ""


def test_every_row_checks_and_passes(tmp_path):
    r, table = _run(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    # 11 kinds: decode x5, prefill, extend, mixed, bf16, fp32, and fp32 with allow_tf32 (exact on the CPU)
    assert len(rows) == 11 and all(row.rstrip(" |").endswith("pass") for row in rows), table
    assert any(row.startswith("| prefill 2x20 over 37 tf32 |") for row in rows), table


def test_a_wrong_output_fails_its_row(tmp_path):
    """The check is real: a kernel that returned softmax over the wrong keys would fail. Simulated by
    a reference that attends one key fewer (sitecustomize patches it in the child)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import torch_timing\n"
        "_ref = torch_timing.attention_ref\n"
        "def _short(q, k, v, positions, scale=None):\n"
        "    return _ref(q, k, v, positions - 1, scale)\n"
        "torch_timing.attention_ref = _short\n")
    env_path = os.pathsep.join([str(tmp_path), str(BENCH.parent)] + [p for p in sys.path if p])
    r, table = _run(tmp_path, ("PYTHONPATH", env_path))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL" in table


def test_cpu_mode_times_both_and_checks_every_row(tmp_path):
    """--cpu (libkvblock's CPU kernels against torch's CPU SDPA) on a tiny length: every dtype's prefill and
    decode row is checked, timed on both sides, and the prefill rows are judged against the target."""
    r, table = _run(tmp_path, args=("--cpu", "--tokens", "40"))
    assert r.returncode == 0, r.stdout + r.stderr
    import kvblock
    assert f"libkvblock path {kvblock.cpu_isa()} " in table and f"{os.cpu_count()} threads each" in table, table
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    names = [cells[0].lstrip("| ") for cells in rows]
    kinds = (("prefill", 1), ("decode", 8))
    assert names == [f"{k} {n}x40 {d}" for k, n in kinds for d in ("fp32", "bf16", "fp16")], table
    for cells in rows:
        assert cells[-1].rstrip(" |") == "pass", table
        assert cells[4].endswith(("GFLOP/s", "GB/s")) and float(cells[5]) > 0, table  # torch timed, ratio given
        assert (">= 1.5: " in cells[6]) == cells[0].startswith("| prefill"), table


ENGINE_BOUND = BENCH.parent / "engine_bound.py"


def test_engine_bound_dry_run_times_every_batch(tmp_path):
    """tools/gpu/engine_bound.py (the engine's decode step against its bytes) on the CPU with a tiny Llama:
    every batch size gets decode-only steps with the whole batch, a bound, a ratio and the manager's share."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(BENCH.parent)] + [p for p in sys.path if p]))
    out = tmp_path / "bound.md"
    r = subprocess.run([sys.executable, str(ENGINE_BOUND), "--device", "cpu", "--tiny", "--seqs", "3,8",
                        "--prompt", "20", "--steps", "4", "--out", str(out)], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    table = out.read_text()
    rows = [[c.strip() for c in line.strip("| \n").split(" | ")] for line in table.splitlines()
            if line.startswith("| ") and "---" not in line][1:]
    assert [row[0] for row in rows] == ["3", "8"], table
    for row in rows:
        steps, step_ms, bound_ms, ratio = int(row[1]), float(row[2]), float(row[4]), float(row[5])
        assert steps == 4 and step_ms > 0 and bound_ms > 0 and ratio > 0, table
        assert row[6].startswith("<= 1.3: ") and row[-1] == "pass", table


def _params(c):
    """(all parameters, those a decode step reads in full: all but the embedding table) of a Llama config."""
    qkv = c.hidden * (c.num_q_heads + 2 * c.num_kv_heads) * c.head_dim
    layer = qkv + c.num_q_heads * c.head_dim * c.hidden + 3 * c.hidden * c.ffn + 2 * c.hidden
    read = c.num_layers * layer + c.hidden + c.vocab * c.hidden
    return read + c.vocab * c.hidden, read


def test_engine_bound_model_and_its_bytes():
    """The bound's model has Llama-3-8B's 8,030,261,248 parameters (its published count), and the bytes a
    step reads are every weight but the embedding table's (counted on the tiny model, fp32)."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        import engine_bound
    finally:
        sys.path.pop(0)
    from kvblock.engine.checkpoint import HFConfig
    from kvblock.engine.torch_model import TorchModel
    assert _params(HFConfig.from_dict(engine_bound.LLAMA3_8B))[0] == 8_030_261_248
    c = HFConfig.from_dict(engine_bound.TINY)
    model = TorchModel(c, engine_bound.random_weights(c, torch, "cpu", torch.float32), "cpu", "float32", max_len=64)
    assert engine_bound.weight_bytes_per_step(model) == 4 * _params(c)[1]
