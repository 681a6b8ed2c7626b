"""Generation backends behind one small interface: ``generate(prompts, n, max_new_tokens, temperature)``
returns, for each prompt, ``n`` completions (the text after the prompt).

- ``transformers`` (default): a local model on CPU or GPU; also what the training stages sample with.
- ``vllm``: imported only when chosen (it cannot share an environment with prefect; see STACK-NOTES).
- ``openai``: any OpenAI-compatible endpoint (a vLLM server, ``transformers serve``, a hosted model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class GenerationBackend(Protocol):
    def generate(self, prompts: Sequence[str], n: int, max_new_tokens: int, temperature: float) -> list[list[str]]:
        ...


def cpu_cache(device: str) -> str | None:
    """The key/value cache ``model.generate`` uses on ``device``: on a CPU a static one, written in place
    (transformers' default concatenates every layer's keys and values at every new token: one RL epoch's
    60 sequences of the 4x256 policy decoded at 107-128 ms a token with it, 43-51 ms with a static cache;
    docs/learning.md at 88f971b, "On a CPU a decode step was mostly the key/value cache's copy"). Elsewhere the
    library's default."""
    return "static" if device == "cpu" else None


def default_device() -> str:
    """Where a policy samples when no device is named: the GPU the process sees, as training uses it, else
    the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class TransformersBackend:
    """Sampling with ``model.generate``. ``model`` is a loaded model or a path; prompts are batched
    ``batch_size`` at a time (each expands to ``n`` sequences). ``device`` None: :func:`default_device`
    (a policy just loaded sits on the CPU, and would sample there on a GPU host)."""

    def __init__(self, model: Any, tokenizer: Any = None, *, device: str | None = None, batch_size: int = 8,
                 seed: int | None = 0, cache_implementation: str | None = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        device = device or default_device()

        if isinstance(model, str) or hasattr(model, "__fspath__"):
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            model = AutoModelForCausalLM.from_pretrained(model)
        if tokenizer is None:
            raise ValueError("pass the tokenizer along with a loaded model (or pass a path for both)")
        self.model, self.tokenizer = model.to(device), tokenizer
        self.device, self.batch_size, self.seed = device, batch_size, seed
        self.cache_implementation = cache_implementation or cpu_cache(device)

    def generate(self, prompts: Sequence[str], n: int, max_new_tokens: int, temperature: float) -> list[list[str]]:
        import torch

        if self.seed is not None:
            torch.manual_seed(self.seed)  # same model, prompts and seed -> same samples
        # Left padding: new tokens follow each prompt's last real token in a batch.
        self.tokenizer.padding_side = "left"
        greedy = temperature <= 0
        # Greedy decoding is deterministic: decode once per prompt and repeat the answer n times.
        sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": temperature,
                                                        "top_k": 0, "top_p": 1.0}
        per_prompt = 1 if greedy else n
        was_training = self.model.training
        self.model.eval()
        out: list[list[str]] = []
        try:
            for start in range(0, len(prompts), self.batch_size):
                batch = list(prompts[start:start + self.batch_size])
                enc = self.tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
                with torch.no_grad():
                    ids = self.model.generate(
                        **enc, max_new_tokens=max_new_tokens, num_return_sequences=per_prompt,
                        pad_token_id=self.tokenizer.pad_token_id, eos_token_id=self.tokenizer.eos_token_id,
                        cache_implementation=self.cache_implementation, **sampling,
                    )
                texts = self.tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
                out += [texts[i * per_prompt:(i + 1) * per_prompt] * (n // per_prompt) for i in range(len(batch))]
        finally:
            self.model.train(was_training)
        return out


class VLLMBackend:
    """vLLM offline engine; ``vllm`` is imported here only, when this backend is chosen."""

    def __init__(self, model: str, *, seed: int = 0, **engine_kwargs: Any) -> None:
        try:
            from vllm import LLM
        except ImportError as exc:  # the message says where vLLM lives in this project
            raise ImportError("vLLM is not installed here: run it in its own environment, or serve the model "
                              "with `vllm serve` and choose the `openai` backend") from exc
        self.llm, self.seed = LLM(model=model, seed=seed, **engine_kwargs), seed

    def generate(self, prompts: Sequence[str], n: int, max_new_tokens: int, temperature: float) -> list[list[str]]:
        from vllm import SamplingParams

        params = SamplingParams(n=n, max_tokens=max_new_tokens, temperature=temperature, seed=self.seed)
        return [[o.text for o in r.outputs] for r in self.llm.generate(list(prompts), params)]


class OpenAIBackend:
    """An OpenAI-compatible server. ``chat=False`` uses ``/v1/completions`` (raw prompts, works for models
    without a chat template); ``chat=True`` sends each prompt as one user message."""

    def __init__(self, model: str, *, base_url: str, api_key: str = "none", chat: bool = False,
                 timeout_s: float = 600.0) -> None:
        import openai

        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s)
        self.model, self.chat = model, chat

    def generate(self, prompts: Sequence[str], n: int, max_new_tokens: int, temperature: float) -> list[list[str]]:
        out = []
        for prompt in prompts:
            if self.chat:
                r = self.client.chat.completions.create(
                    model=self.model, messages=[{"role": "user", "content": prompt}], n=n,
                    max_tokens=max_new_tokens, temperature=temperature)
                out.append([c.message.content or "" for c in r.choices])
            else:
                r = self.client.completions.create(model=self.model, prompt=prompt, n=n,
                                                   max_tokens=max_new_tokens, temperature=temperature)
                out.append([c.text for c in sorted(r.choices, key=lambda c: c.index)])
        return out


def make_backend(kind: str, model: Any, **kwargs: Any) -> GenerationBackend:
    """``kind`` is ``transformers``, ``vllm`` or ``openai``; ``kwargs`` go to that backend."""
    if kind == "transformers":
        return TransformersBackend(model, **kwargs)
    if kind == "vllm":
        return VLLMBackend(model, **kwargs)
    if kind == "openai":
        return OpenAIBackend(model, **kwargs)
    raise ValueError(f"backend {kind!r}: use 'transformers', 'vllm' or 'openai'")
