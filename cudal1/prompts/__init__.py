"""Contrastive prompts and response parsing. Prompt wording lives in the ``*.txt`` files of this package."""

from cudal1.prompts.builder import Exemplar, build_prompt, format_exemplars, prompt_text, render_response
from cudal1.prompts.parser import SECTIONS, ParsedResponse, parse_response

__all__ = [
    "SECTIONS", "Exemplar", "ParsedResponse", "build_prompt", "format_exemplars", "parse_response",
    "prompt_text", "render_response",
]
