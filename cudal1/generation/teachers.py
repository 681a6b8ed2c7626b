"""LLM teachers: OpenAI-compatible endpoints (OpenAI, vLLM, `transformers serve`...) asked with a one-shot
prompt to rewrite a reference into a faster ``ModelNew`` (CUDA-L1 stage 1, data augmentation).

The client is the official ``openai`` package, imported when a teacher is built. It makes no retries of
its own (``max_retries=0``): the caller decides (the Prefect tasks retry connection errors, timeouts, 429
and 5xx only; a 4xx or a bad completion is deterministic and never retried).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from cudal1.config import TeacherParams
from cudal1.problems import Problem

ONE_SHOT_PROMPT = '''You are an expert in PyTorch performance engineering.
You replace a reference PyTorch program by a faster one: fuse operators, remove redundant work, pick
better algorithms or layouts, or write custom {kernel_kind} kernels with
`torch.utils.cpp_extension.load_inline`. The new program defines `class ModelNew(nn.Module)` with the
same constructor arguments and the same outputs as `Model`, within floating-point tolerance.
Do not cache results between calls, and keep sizes and hyperparameters unchanged.

Example reference:
```python
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)
```

Example answer:
## Performance Analysis
The reference makes two passes over memory: the sum writes a temporary that ReLU reads again. Clamping the
sum in place makes it one pass, with no second temporary.

## Code Implementation
```python
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.add(a, b).clamp_(min=0)
```

Reference:
```python
{reference}
```

Answer in two sections, as in the example: `## Performance Analysis` (what makes the reference slow and
what your program changes, in a few sentences), then `## Code Implementation` with one fenced python block
holding the complete new program.
'''

# The completions API continues the text, so the prompt opens the answer's fence itself (its answers carry
# no analysis: their SFT targets get one written from the measured facts).
_COMPLETIONS_SUFFIX = "\nAnswer:\n```python\n"


class TeacherUnavailable(RuntimeError):
    """A configured endpoint cannot be used (down, wrong model, no key); the message names the params
    key and the fix. Raised by the pre-flight check, which is not retried: it reports the state now."""


def build_prompt(problem: Problem, gpu: bool) -> str:
    """The one-shot prompt for ``problem``: CUDA kernels when a GPU evaluates, C++ otherwise."""
    return ONE_SHOT_PROMPT.format(kernel_kind="CUDA" if gpu else "C++", reference=problem.source.strip("\n"))


def extract_program(text: str) -> str | None:
    """The program inside a completion: the last complete fenced block defining ``ModelNew``.

    >>> extract_program("Sure.\\n```python\\nclass ModelNew: pass\\n```\\n").strip()
    'class ModelNew: pass'
    >>> extract_program("no code") is None
    True
    """
    from cudal1.prompts.parser import parse_response

    parsed = parse_response(text)
    return parsed.code if parsed.ok else None


@dataclass(frozen=True)
class Completion:
    """One sampled answer: the raw text (kept for the record) and the program found in it."""

    text: str
    program: str | None


class OpenAITeacher:
    """One endpoint from ``augment.teachers``; ``where`` names its params entry in error messages."""

    def __init__(self, params: TeacherParams, where: str = "augment.teachers[?]") -> None:
        import openai

        self.params, self.where = params, where
        key = "EMPTY"  # local servers ignore the key, the client insists on one
        if params.api_key_env:
            key = os.environ.get(params.api_key_env, "")
            if not key:
                raise TeacherUnavailable(
                    f"{where}.api_key_env: environment variable {params.api_key_env} is empty; export it "
                    "with the endpoint's API key, or set api_key_env: null for a server without keys"
                )
        self.client = openai.OpenAI(base_url=params.base_url, api_key=key, max_retries=0,
                                    timeout=params.request_timeout_s)

    @property
    def origin(self) -> str:
        return f"teacher:{self.params.name}"

    def check(self, timeout_s: float = 10.0) -> str:
        """Fail fast, before any work, when the endpoint is down or refuses the key. Returns a warning
        (or '') when the endpoint lists models but not ours: some servers (`transformers serve`) load
        any local path on request without listing it, so that alone does not stop the run."""
        import openai

        try:
            models = [m.id for m in self.client.with_options(timeout=timeout_s).models.list()]
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise TeacherUnavailable(
                f"{self.where}.base_url: cannot reach {self.params.base_url} ({exc.__class__.__name__}: {exc}). "
                "Start the server, correct base_url, or remove this teacher from params.yaml"
            ) from exc
        except openai.APIStatusError as exc:
            if exc.status_code in (401, 403):
                raise TeacherUnavailable(
                    f"{self.where}.api_key_env: {self.params.base_url} refused the key ({exc.status_code}); "
                    "export a valid key in the variable named by api_key_env"
                ) from exc
            return ""  # some servers do not list models; sampling will tell
        if models and self.params.model not in models:
            return (f"{self.where}.model: {self.params.base_url} does not list {self.params.model!r} "
                    f"(it lists {', '.join(models[:10])}); if sampling fails, correct `model`")
        return ""

    def sample(self, problem: Problem, gpu: bool = False) -> Completion:
        """One completion for ``problem``; the client's errors propagate (the caller retries I/O ones)."""
        return self.complete(build_prompt(problem, gpu))

    def complete(self, prompt: str) -> Completion:
        """One completion for any prompt that asks for a fenced program (the one-shot prompt, the
        contrastive prompt); the client's errors propagate."""
        p = self.params
        if p.api == "chat":
            response: Any = self.client.chat.completions.create(
                model=p.model, messages=[{"role": "user", "content": prompt}],
                temperature=p.temperature, max_tokens=p.max_tokens,
            )
            text = response.choices[0].message.content or ""
        else:
            response = self.client.completions.create(
                model=p.model, prompt=prompt + _COMPLETIONS_SUFFIX,
                temperature=p.temperature, max_tokens=p.max_tokens,
            )
            choice = response.choices[0]
            # Re-open the fence the prompt opened, so the answer parses like a chat answer; an answer
            # that stopped on its own (not at max_tokens) is complete even if it never closed the fence.
            text = "```python\n" + (choice.text or "")
            if "```" not in (choice.text or "") and choice.finish_reason != "length":
                text += "\n```\n"
        return Completion(text, extract_program(text))
