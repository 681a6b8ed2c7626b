"""The tiny policy build (deterministic, loadable) and the generation backends' interface."""

from __future__ import annotations

import hashlib

import pytest

from cudal1.generation.backends import TransformersBackend, VLLMBackend, make_backend
from cudal1.generation.tiny_policy import EOS, PAD, build_tiny_policy

TEXTS = ["import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"] * 3


def digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    return build_tiny_policy(tmp_path_factory.mktemp("policy"), TEXTS, vocab_size=512, hidden=64, layers=1)


def test_build_is_deterministic(policy_dir, tmp_path):
    again = build_tiny_policy(tmp_path / "again", TEXTS, vocab_size=512, hidden=64, layers=1)
    assert digest(again) == digest(policy_dir)


def test_loads_with_auto_classes(policy_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(policy_dir)
    tok = AutoTokenizer.from_pretrained(policy_dir)
    assert model.config.head_dim >= 32 and model.config.tie_word_embeddings
    assert tok.eos_token == EOS and tok.pad_token == PAD
    code = "    x = torch.relu(x)  # ünïcode\n\tdone"
    assert tok.decode(tok(code)["input_ids"]) == code  # byte-level: any text round-trips
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat.endswith("<|assistant|>\n")


def test_hidden_must_fit_the_head_size(tmp_path):
    with pytest.raises(ValueError, match="multiple of 32"):
        build_tiny_policy(tmp_path, TEXTS, hidden=48)


def test_transformers_backend_shapes(policy_dir):
    backend = make_backend("transformers", str(policy_dir), batch_size=2)
    out = backend.generate(["import", "class", "def"], n=3, max_new_tokens=4, temperature=1.0)
    assert [len(o) for o in out] == [3, 3, 3] and all(isinstance(t, str) for o in out for t in o)
    greedy = backend.generate(["import"], n=2, max_new_tokens=4, temperature=0.0)
    assert greedy[0][0] == greedy[0][1]
    assert isinstance(backend, TransformersBackend)


def test_a_static_cache_on_the_cpu_writes_what_the_default_one_does(policy_dir):
    """On a CPU the backend (and the RL stage's GRPOConfig) decodes with a static key/value cache, written in
    place, instead of transformers' default one, which concatenates every layer's keys and values at every
    token (backends.cpu_cache): the same text, greedy and sampled on one seed."""
    from cudal1.generation.backends import cpu_cache

    assert cpu_cache("cpu") == "static" and cpu_cache("cuda:0") is None
    static = make_backend("transformers", str(policy_dir), batch_size=2)
    dynamic = make_backend("transformers", str(policy_dir), batch_size=2, cache_implementation="dynamic")
    assert static.cache_implementation == "static" and dynamic.cache_implementation == "dynamic"
    prompts = ["import torch", "class", "def forward(self, x):"]  # of different lengths: left padding
    for temperature in (0.0, 1.0):
        assert static.generate(prompts, n=2, max_new_tokens=12, temperature=temperature) == \
            dynamic.generate(prompts, n=2, max_new_tokens=12, temperature=temperature)


def test_vllm_is_imported_only_when_chosen():
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="openai"):
            VLLMBackend("any")
    with pytest.raises(ValueError, match="transformers"):
        make_backend("nope", "x")
