"""A tiny policy the project builds itself: a small Llama-shaped decoder with a byte-level BPE tokenizer
trained locally on the problem and corpus sources. It lets the whole method run on a CPU with no
downloads; users with real weights point the ``policy`` params at a hub id or a local path instead.

The build is deterministic: the tokenizer trainer sees the texts in the given order, and the weights are
initialised under ``torch.manual_seed(seed)``; same inputs -> same files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

# Special tokens. The chat markers let a chat template exist (for OpenAI-style servers and
# conversational datasets); the training stages themselves use plain prompt/completion text.
PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
CHAT_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, BOS, EOS, *CHAT_TOKENS)

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}" + EOS + "\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

HEAD_DIM = 32  # vLLM's CPU attention rejects 16; 32 keeps the model small and servable


def train_tokenizer(texts: Sequence[str], vocab_size: int):
    """Byte-level BPE on ``texts``: every byte is in the alphabet, so any program can be encoded. The
    vocabulary may come out smaller than ``vocab_size`` when the texts have fewer recurring pieces."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if not texts:
        raise ValueError("texts is empty: pass the problem and corpus sources the tokenizer should learn")
    core = Tokenizer(models.BPE())
    # Merges stay inside a line but may cross spaces, so a line the corpus repeats (an import, a
    # `def forward` signature, a protocol heading) becomes one token: sequences are ~5x shorter than with
    # word-level splitting, which is what makes CPU training feasible. Splitting at newlines also keeps
    # a prompt that ends a line tokenised the same alone and followed by its completion (SFT needs that).
    # add_prefix_space=False: code must round-trip byte for byte (indentation is syntax).
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split("\n", behavior="merged_with_previous"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(list(texts), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        additional_special_tokens=list(CHAT_TOKENS),
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    # Left padding: batched generation appends new tokens after each prompt's last real token.
    tokenizer.padding_side = "left"
    return tokenizer


def tiny_llama_config(vocab_size: int, hidden: int, layers: int, max_positions: int, tokenizer):
    from transformers import LlamaConfig

    if hidden % HEAD_DIM:
        raise ValueError(f"hidden={hidden}: must be a multiple of {HEAD_DIM} (the head size)")
    heads = hidden // HEAD_DIM
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=HEAD_DIM,
        max_position_embeddings=max_positions,
        rope_theta=10000.0,
        tie_word_embeddings=True,  # halves the parameters of a model whose embedding dominates
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def build_tiny_policy(
    out_dir: Path,
    texts: Sequence[str],
    *,
    vocab_size: int = 4096,
    hidden: int = 128,
    layers: int = 2,
    max_positions: int = 4096,
    seed: int = 0,
) -> Path:
    """Train a tokenizer on ``texts``, initialise a Llama of the given size, save both to ``out_dir``.

    Returns ``out_dir``, loadable with ``AutoModelForCausalLM.from_pretrained`` and
    ``AutoTokenizer.from_pretrained``.
    """
    import torch
    from transformers import GenerationConfig, LlamaForCausalLM

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(texts, vocab_size)
    config = tiny_llama_config(len(tokenizer), hidden, layers, max_positions, tokenizer)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=True,
    )
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    # The build recipe travels with the weights, so a checkpoint says what made it.
    recipe = {"vocab_size": vocab_size, "hidden": hidden, "layers": layers, "max_positions": max_positions,
              "seed": seed, "texts": len(texts), "parameters": sum(p.numel() for p in model.parameters())}
    (out_dir / "tiny_policy.json").write_text(json.dumps(recipe, indent=2, sort_keys=True) + "\n")
    return out_dir
