"""The models that write candidates in `cudal1 optimize`: OpenAI-compatible endpoints and a local policy
(a folder or hub id loaded with transformers). Every answer is kept in a completion cache, so a resumed
run asks nothing twice; an endpoint that is down, slow or answers garbage raises :class:`ModelFailure`
with a message naming the endpoint and the fix, and never hangs (each request has a timeout).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from cudal1.config import TeacherParams
from cudal1.generation.augment import CompletionCache

# A policy trained by the pipeline (`make run`) is used when no model is named.
TRAINED_POLICY = Path("models/contrastive_rl")


class ModelFailure(RuntimeError):
    """A model could not be asked: the message names it and says how to fix it."""


class Writer(Protocol):
    """Something that answers a prompt ``n`` times."""

    origin: str

    def check(self) -> str:
        """Fail fast before any work (raise ModelFailure); return a warning or ''."""
        ...

    def answers(self, prompt: str, n: int) -> list[str]:
        ...


def endpoint_name(model: str) -> str:
    """A short origin name for a model id: ``org/Qwen2.5-7B`` -> ``Qwen2.5-7B``; paths keep their last part."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", model.rstrip("/").rsplit("/", 1)[-1]) or "model"


class EndpointWriter:
    """An OpenAI-compatible endpoint; transient errors (connection, timeout, 429, 5xx) are retried
    ``params.retries`` times, a wrong answer is not."""

    def __init__(self, params: TeacherParams) -> None:
        from cudal1.generation.teachers import OpenAITeacher, TeacherUnavailable

        self.params = params
        self.origin = f"model:{params.name}"
        self.where = f"--endpoint {params.base_url} --model {params.model}"
        try:
            self.teacher = OpenAITeacher(params, self.where)
        except TeacherUnavailable as exc:
            raise ModelFailure(str(exc)) from exc

    def check(self) -> str:
        from cudal1.generation.teachers import TeacherUnavailable

        try:
            return self.teacher.check(timeout_s=min(10.0, self.params.request_timeout_s))
        except TeacherUnavailable as exc:
            raise ModelFailure(str(exc).replace("augment.teachers", "")) from exc
        except Exception as exc:  # noqa: BLE001 - anything else means it does not speak the API
            raise ModelFailure(self._garbage("GET /models", exc)) from exc

    def _garbage(self, what: str, exc: BaseException) -> str:
        return (f"{self.where}: the endpoint's answer to {what} is not an OpenAI-compatible response "
                f"({type(exc).__name__}: {str(exc)[:200]}); check the URL (it usually ends in /v1) and that the "
                "server speaks the OpenAI API")

    def answers(self, prompt: str, n: int) -> list[str]:
        with ThreadPoolExecutor(max_workers=min(n, 4)) as pool:
            return list(pool.map(lambda _: self._ask(prompt), range(n)))

    def _ask(self, prompt: str) -> str:
        import openai

        for attempt in range(self.params.retries + 1):
            try:
                text = self.teacher.complete(prompt).text
            except (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError,
                    openai.InternalServerError) as exc:
                if attempt < self.params.retries:
                    time.sleep(2.0 * (attempt + 1))
                    continue
                kind = "did not answer within " f"{self.params.request_timeout_s:g} s" \
                    if isinstance(exc, openai.APITimeoutError) else f"failed ({type(exc).__name__}: {exc})"
                raise ModelFailure(f"{self.where}: the endpoint {kind}, {attempt + 1} time(s); start or fix the "
                                   "server, or raise --request-timeout-s for a slow one") from exc
            except openai.APIStatusError as exc:
                raise ModelFailure(f"{self.where}: the endpoint refused the request ({exc.status_code}: "
                                   f"{str(exc)[:200]}); check --model and --api") from exc
            except Exception as exc:  # noqa: BLE001 - a body that is not a completion
                raise ModelFailure(self._garbage(f"POST /{self.params.api}", exc)) from exc
            if not isinstance(text, str):
                raise ModelFailure(self._garbage(f"POST /{self.params.api}", TypeError(f"text is {type(text)}")))
            return text
        raise AssertionError("unreachable")


class PolicyWriter:
    """A local policy (a folder saved by the pipeline, or a hub id) sampled with transformers."""

    def __init__(self, source: str, device: str, max_tokens: int, temperature: float = 0.7) -> None:
        self.source, self.device = source, device
        self.max_tokens, self.temperature = max_tokens, temperature
        self.origin = f"policy:{endpoint_name(source)}"
        self._backend = None

    def check(self) -> str:
        from cudal1.generation.backends import TransformersBackend

        try:
            self._backend = TransformersBackend(self.source, device=self.device)
        except Exception as exc:  # noqa: BLE001 - a path, a hub id or weights: each fails its own way
            raise ModelFailure(f"--policy {self.source}: cannot load it as a transformers model "
                               f"({type(exc).__name__}: {str(exc)[:200]}); pass a folder with config.json and "
                               "weights (e.g. models/contrastive_rl after `make run`) or a hub id") from exc
        return ""

    def answers(self, prompt: str, n: int) -> list[str]:
        if self._backend is None:
            self.check()
        backend = self._backend
        # The prompt and the answer share the model's context: a small policy's would overflow.
        context = getattr(backend.model.config, "max_position_embeddings", None)  # type: ignore[union-attr]
        room = self.max_tokens
        if context:
            used = len(backend.tokenizer(prompt, add_special_tokens=False)["input_ids"])  # type: ignore[union-attr]
            room = min(room, context - used)
            if room < 16:
                raise ModelFailure(f"--policy {self.source}: the prompt takes {used} of its {context} positions, "
                                   "leaving no room for an answer; use a model with a longer context")
        return backend.generate([prompt], n, room, self.temperature)[0]  # type: ignore[union-attr]


class CachedWriter:
    """A writer whose answers are kept in ``cache`` (keyed by its settings and the prompt): the same
    prompt asked again, in this run or a resumed one, gets the same answers without asking."""

    def __init__(self, writer: Writer, settings: dict, cache: CompletionCache) -> None:
        self.writer, self.settings, self.cache = writer, settings, cache
        self.origin = writer.origin

    def check(self) -> str:
        return self.writer.check()

    def answers(self, prompt: str, n: int) -> tuple[list[str], int]:
        """``n`` answers and how many of them were asked now (the rest came from the cache)."""
        key = CompletionCache.key(self.settings, prompt)
        texts = [self.cache.get(key, i) for i in range(n)]
        missing = [i for i, t in enumerate(texts) if t is None]
        if missing:
            for i, text in zip(missing, self.writer.answers(prompt, len(missing)), strict=True):
                texts[i] = text
                self.cache.add(key, text)
        return [t or "" for t in texts], len(missing)


def make_writers(endpoints: Sequence[str], models: Sequence[str], *, api: str = "chat",
                 api_key_env: str | None = None, policy: str | None = None, device: str = "cpu",
                 max_tokens: int = 4096, temperature: float = 0.7, request_timeout_s: float = 300.0,
                 cache: CompletionCache) -> list[CachedWriter]:
    """The configured models: each ``--endpoint`` with its ``--model`` (one endpoint may serve several
    models), then the policy. With neither, the pipeline's trained policy when there is one."""
    if api not in ("chat", "completions"):
        raise ModelFailure(f"--api {api}: use chat (most servers) or completions (raw prompts, models without a chat "
                           "template)")
    if len(endpoints) != len(models) and not (len(endpoints) == 1 and models):
        raise ModelFailure(f"{len(endpoints)} --endpoint and {len(models)} --model: give one --model per --endpoint "
                           "(or one --endpoint for several models)")
    pairs = list(zip(endpoints * len(models) if len(endpoints) == 1 else endpoints, models, strict=True))
    writers: list[CachedWriter] = []
    names: set[str] = set()
    for base_url, model in pairs:
        name = endpoint_name(model)
        while name in names:
            name += "_"
        names.add(name)
        try:
            params = TeacherParams(name=name, base_url=base_url, model=model, api_key_env=api_key_env, api=api,
                                   temperature=temperature, max_tokens=max_tokens,
                                   request_timeout_s=request_timeout_s, retries=1)
        except ValueError as exc:
            raise ModelFailure(f"--endpoint {base_url}: {exc}") from exc
        settings = {"base_url": base_url, "model": model, "api": api, "temperature": temperature,
                    "max_tokens": max_tokens}
        writers.append(CachedWriter(EndpointWriter(params), settings, cache))
    if policy is None and not pairs and (TRAINED_POLICY / "config.json").is_file():
        policy = str(TRAINED_POLICY)
    if policy is not None:
        settings = {"policy": str(Path(policy).resolve()) if Path(policy).exists() else policy,
                    "temperature": temperature, "max_tokens": max_tokens}
        writers.append(CachedWriter(PolicyWriter(policy, device, max_tokens, temperature), settings, cache))
    return writers
