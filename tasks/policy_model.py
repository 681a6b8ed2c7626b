"""The trained policy as an MLflow pyfunc model ("models from code": MLflow copies this file into the model,
so loading it needs only the installed ``cudal1`` package, not this repository).

The model's artifact ``policy`` is the policy folder the stage saved (``config.json``, weights, tokenizer).
``predict`` takes prompts and returns one completion each; ``generate`` gives the full backend interface
(n samples, length, temperature), which the promotion gate uses through ``unwrap_python_model()``.
"""

from __future__ import annotations

from typing import Any

import mlflow
from mlflow.pyfunc import PythonModel


class PolicyModel(PythonModel):
    def load_context(self, context: Any) -> None:
        from cudal1.training.finetune import load_policy

        self.policy_dir = context.artifacts["policy"]
        self.model, self.tokenizer = load_policy(self.policy_dir)
        self.max_new_tokens = int((context.model_config or {}).get("max_new_tokens", 160))

    def generate(self, prompts: list[str], n: int = 1, max_new_tokens: int | None = None,
                 temperature: float = 0.0, seed: int = 0) -> list[list[str]]:
        from cudal1.generation.backends import TransformersBackend

        backend = TransformersBackend(self.model, self.tokenizer, seed=seed)
        return backend.generate(list(prompts), n, max_new_tokens or self.max_new_tokens, temperature)

    def predict(self, context: Any, model_input: list[str], params: dict[str, Any] | None = None) -> list[str]:
        """Greedy completion of each prompt (deterministic: the same prompt gives the same program)."""
        return [c[0] for c in self.generate(list(model_input), 1)]


mlflow.models.set_model(PolicyModel())
