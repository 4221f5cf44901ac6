"""Generation as users expect it (kvblock/engine/generation.py) on the torch engine: the checkpoint's EOS,
min_tokens, stop token ids and greedy / top_k=1 sampling stop and choose exactly where transformers' generate
does (fp32, a random tiny checkpoint written here); logprobs are transformers' log-softmax; stop strings cut
the text before them; seeded sampling repeats itself whatever runs beside it. Without torch / transformers /
tokenizers these SKIP, visibly."""
from __future__ import annotations

import json

import numpy as np
import pytest

from kvblock.engine.generation import ParamError, SamplingParams, draw, eos_token_ids, top_logprobs
from test_engine_torch import HAVE_HF as HAVE_TORCH_HF  # torch, safetensors and transformers
from test_engine_torch import HAVE_TORCH
from test_engine_torch import WHY as WHY_TORCH
from test_engine_torch import WHY_HF as WHY_TORCH_HF

try:
    import tokenizers  # noqa: F401
    import torch
    HAVE, WHY = HAVE_TORCH, WHY_TORCH
except Exception as e:
    HAVE, WHY = False, f"tokenizers or torch not importable ({type(e).__name__}: {e})"
HAVE_HF, WHY_HF = (HAVE_TORCH_HF, WHY_TORCH_HF) if HAVE else (False, WHY)
needs_torch = pytest.mark.skipif(not HAVE, reason=f"SKIP generation on the torch engine: {WHY}")
needs_hf = pytest.mark.skipif(not HAVE_HF, reason=f"SKIP generation vs transformers: {WHY_HF}")


def test_draw_greedy_topk_topp_and_seed() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(50)
    best = int(np.argmax(x))
    assert draw(x, SamplingParams(temperature=0)) == best
    assert draw(x, SamplingParams(temperature=5, top_k=1), (1, 0, 0)) == best
    assert draw(x, SamplingParams(temperature=1, top_p=1e-9), (1, 0, 0)) == best
    assert draw(x, SamplingParams(temperature=0), banned=[best]) == int(np.argsort(-x)[1])
    top3 = set(np.argsort(-x)[:3].tolist())
    drawn = {draw(x, SamplingParams(temperature=3, top_k=3), (7, 0, i)) for i in range(200)}
    assert drawn == top3  # all of the top 3 and nothing else
    # top_p: the fewest most likely tokens whose probability reaches p
    pr = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    order = np.argsort(-pr)
    m = int(np.searchsorted(np.cumsum(pr[order]), 0.5)) + 1
    drawn = {draw(x, SamplingParams(temperature=1, top_p=0.5), (7, 0, i)) for i in range(300)}
    assert drawn == set(order[:m].tolist())
    p = SamplingParams(temperature=1.0)
    a = [draw(x, p, (42, 0, i)) for i in range(30)]
    assert a == [draw(x, p, (42, 0, i)) for i in range(30)]
    assert a != [draw(x, p, (43, 0, i)) for i in range(30)]


def test_top_logprobs_is_log_softmax() -> None:
    x = np.random.default_rng(2).standard_normal(40)
    ref = x - np.log(np.exp(x).sum())
    lp, top = top_logprobs(x, 3, 5)
    assert lp == pytest.approx(ref[3])
    assert [t for t, _ in top] == np.argsort(-ref)[:5].tolist()
    assert [v for _, v in top] == pytest.approx(np.sort(ref)[::-1][:5])


@pytest.mark.parametrize("field,kw", [("max_tokens", dict(max_tokens=0)), ("min_tokens", dict(min_tokens=20)),
                                      ("temperature", dict(temperature=-1)), ("top_p", dict(top_p=0)),
                                      ("top_k", dict(top_k=-5)), ("n", dict(n=0)), ("seed", dict(seed=-1)),
                                      ("logprobs", dict(logprobs=21)), ("stop", dict(stop=("",))),
                                      ("stop_token_ids", dict(stop_token_ids=(999,)))])
def test_validate_names_the_field(field: str, kw: dict) -> None:
    with pytest.raises(ParamError) as e:
        SamplingParams(**kw).validate(vocab=100)
    assert e.value.param == field


def test_eos_ids_from_both_files(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 7}))
    assert eos_token_ids(str(tmp_path)) == (7,)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [3, 7]}))
    assert eos_token_ids(str(tmp_path)) == (3, 7)


def _engine(d, eos=None, tokenizer=False, **cfg):
    from kvblock.engine import EngineConfig
    from kvblock.engine.checkpoint import load_tokenizer
    from kvblock.engine.generation import Generation
    from kvblock.engine.torch_engine import TorchEngine
    from kvblock.engine.torch_model import TorchModel
    model = TorchModel.from_pretrained(str(d), "cpu", "float32", max_len=256)
    eng = TorchEngine(model, EngineConfig(num_blocks=64, block_size=8, **cfg), cuda_graph=False)
    eng.generation = Generation(eos_token_ids(str(d)) if eos is None else eos,
                                load_tokenizer(str(d)) if tokenizer else None)
    return eng


def _generate(eng, prompts, params, seeds=None):
    from kvblock.engine import Request
    for i, p in enumerate(prompts):
        eng.add_request(Request(i, p, params.max_tokens, n=params.n, seed=(seeds or [0] * len(prompts))[i],
                                params=params))
    out = eng.run()
    return [sorted(out[i], key=lambda s: s.index) for i in range(len(prompts))]


def _prompts(vocab: int, n: int = 3):
    rng = np.random.default_rng(4)
    return [rng.integers(5, vocab, 6 + 3 * i).tolist() for i in range(n)]


@needs_hf
def test_eos_min_tokens_stop_ids_and_top_k_1_match_transformers(tmp_path) -> None:
    from kvblock.engine.hf_reference import load_hf
    from serving_helpers import write_servable
    d, cfg = write_servable(tmp_path / "m", eos=(1,))
    prompts = _prompts(cfg.vocab)
    hf = load_hf(str(d), "cpu", "float32")

    def hf_generate(p, **kw):
        out = hf.generate(torch.tensor([p]), max_new_tokens=24, pad_token_id=0, **kw)
        return out[0, len(p):].tolist()

    free = [hf_generate(p, do_sample=False, eos_token_id=None) for p in prompts]
    # EOS: a token greedy decoding reaches a few tokens in (and not before), declared in generation_config.json
    eos = [f[4] for f in free if f[4] not in f[:4]][:1]
    assert eos, "no usable eos token in the greedy outputs"
    d2, _ = write_servable(tmp_path / "e", eos=(250, eos[0]))  # a list: either stops
    eng = _engine(d2)
    got = _generate(eng, prompts, SamplingParams(max_tokens=24, temperature=0))
    for p, g in zip(prompts, got):
        want = hf_generate(p, do_sample=False, eos_token_id=[250, eos[0]])
        assert g[0].output == want
        assert g[0].finish_reason == ("stop" if want[-1] in (250, eos[0]) else "length"), (want, eos)
    assert any(g[0].finish_reason == "stop" and len(g[0].output) < 24 for g in got)
    # min_tokens = transformers' min_new_tokens; top_k=1 sampling = greedy; stop token ids = more eos ids
    got = _generate(_engine(d2), prompts, SamplingParams(max_tokens=24, temperature=0.8, top_k=1, min_tokens=8,
                                                         stop_token_ids=(free[1][6],)))
    for p, g in zip(prompts, got):
        want = hf_generate(p, do_sample=True, top_k=1, min_new_tokens=8, eos_token_id=[250, eos[0], free[1][6]])
        assert g[0].output == want
    # logprobs: transformers' log-softmax of its logits at every generated position
    got = _generate(_engine(d2), prompts[:1], SamplingParams(max_tokens=6, temperature=0, logprobs=3,
                                                             ignore_eos=True))
    s = got[0][0]
    ref = hf.generate(torch.tensor([prompts[0]]), max_new_tokens=6, do_sample=False, eos_token_id=None,
                      pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    assert s.output == ref.sequences[0, len(prompts[0]):].tolist()
    for (tok, lp, top), lg in zip(s.logprobs, ref.logits):
        ls = torch.log_softmax(lg[0].double(), -1)
        assert lp == pytest.approx(float(ls[tok]), abs=1e-4)
        assert [t for t, _ in top] == ls.topk(3).indices.tolist()


@needs_torch
def test_seeded_sampling_repeats_whatever_runs_beside_it(tmp_path) -> None:
    from serving_helpers import write_servable
    d, cfg = write_servable(tmp_path / "m", eos=())
    prompts = _prompts(cfg.vocab, 4)
    p = SamplingParams(max_tokens=12, temperature=1.0, top_p=0.9, top_k=50, n=2)
    alone = _generate(_engine(d), prompts[:1], p, seeds=[11])[0]
    crowd = _generate(_engine(d), prompts[::-1], p, seeds=[5, 6, 7, 11])[3]
    assert [s.output for s in alone] == [s.output for s in crowd]
    assert alone[0].output != alone[1].output  # the n samples differ
    other = _generate(_engine(d), prompts[:1], SamplingParams(**{**p.__dict__, "seed": 12}), seeds=[11])[0]
    assert [s.output for s in other] != [s.output for s in alone]  # params.seed wins over the request's


@needs_torch
def test_stop_strings_cut_the_text(tmp_path) -> None:
    from serving_helpers import word, write_servable
    d, cfg = write_servable(tmp_path / "m", eos=())
    prompt = _prompts(cfg.vocab)[0]
    free = _generate(_engine(d, tokenizer=True), [prompt], SamplingParams(max_tokens=20, temperature=0))[0][0]
    words = [word(t) for t in free.output]
    # decoded after the prompt: the text is the whole text's continuation, from the space after the prompt
    assert free.text.text == " " + " ".join(words) and free.finish_reason == "length"
    k = next(i for i in range(3, 18) if words[i] not in words[:i])
    stop = f"{words[k][1:]} {words[k + 1]}"  # across a token boundary, from inside a token
    g = _generate(_engine(d, tokenizer=True), [prompt],
                  SamplingParams(max_tokens=20, temperature=0, stop=("never", stop)))[0][0]
    assert g.finish_reason == "stop"
    assert g.output == free.output[:k + 2]
    assert g.text.text == " " + " ".join(words[:k]) + " w"
    gen = _engine(d, tokenizer=True).generation
    g.finish_reason = None  # as it looked while running: a stop string's possible start is held back
    g.text.text = " " + " ".join(words[:k + 1])
    assert gen.stable_text(g) == " " + " ".join(words[:k]) + " w"


@needs_torch
def test_abort_frees_the_blocks(tmp_path) -> None:
    from kvblock.engine import Request
    from kvblock.errors import KvbError
    from serving_helpers import write_servable
    d, cfg = write_servable(tmp_path / "m", eos=())
    eng = _engine(d)
    for i, p in enumerate(_prompts(cfg.vocab, 3)):
        eng.add_request(Request(i, p, 50, n=2, params=SamplingParams(max_tokens=50, n=2, temperature=0)))
    eng.step()
    eng.step()
    ended = eng.abort(1) + eng.abort(2)
    assert ended and all(s.finish_reason == "abort" for s in ended)
    for s in ended:
        with pytest.raises(KvbError):
            eng.mgr.info(s.seq_id)  # freed (or never allocated)
    eng.run()
    assert eng.mgr.num_free_blocks == eng.mgr.num_blocks
    eng.mgr.check_invariants()
    assert [len(s.output) for s in eng.finished[0]] == [50, 50] and 1 not in eng.finished


@needs_torch
def test_text_is_decoded_incrementally_without_broken_characters() -> None:
    """A byte-level tokenizer splits é and € into several tokens: the text grows without U+FFFD and ends
    equal to decoding every token at once."""
    from types import SimpleNamespace

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from kvblock.engine.generation import Generation
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE({c: i for i, c in enumerate(sorted(alphabet))}, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = "aé b€ c"
    ids = tok.encode(text).ids
    assert len(ids) == len(text.encode())  # one token per byte
    gen = Generation(tokenizer=tok)
    s = SimpleNamespace(output=[], text=None, finish_reason=None,
                        request=SimpleNamespace(params=SamplingParams(max_tokens=len(ids), stop=("zz",))))
    seen = []
    for t in ids:
        s.output.append(t)
        s.finish_reason = gen.finish_reason(s)
        seen.append(gen.stable_text(s))
        assert "\ufffd" not in seen[-1]
    assert seen[-1] == text and s.finish_reason == "length"
    assert seen[1] == "a" and seen[2] == "aé"  # é is 2 bytes: it appears whole, once both arrived


@needs_torch
def test_first_token_keeps_its_space_after_the_prompt() -> None:
    """A SentencePiece (Metaspace) decoder drops the space of the first token it decodes: decoded after
    the prompt's last tokens, the output's first word keeps its space, as in the whole text."""
    from types import SimpleNamespace

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from kvblock.engine.generation import Generation
    vocab = {"<unk>": 0, "\u2581the": 1, "\u2581cat": 2, "\u2581sat": 3, "\u2581down": 4}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    assert tok.decode([2]) == "cat" and tok.decode([1, 2]) == "the cat"  # the first space is dropped
    for prompt, want in (([1], " cat sat down"), ([], "cat sat down"), ([3, 1, 2, 3, 4, 1], " cat sat down")):
        gen = Generation(tokenizer=tok)
        s = SimpleNamespace(output=[], text=None, finish_reason=None,
                            request=SimpleNamespace(prompt=prompt, params=SamplingParams(max_tokens=3)))
        for t in (2, 3, 4):
            s.output.append(t)
            s.finish_reason = gen.finish_reason(s)
        assert gen.stable_text(s) == want, (prompt, gen.stable_text(s))
