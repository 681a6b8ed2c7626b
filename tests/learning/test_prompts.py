"""Prompt build / parse round trip, and the parser on malformed responses."""

from __future__ import annotations

from cudal1.prompts import SECTIONS, Exemplar, build_prompt, parse_response, prompt_text, render_response

PROGRAM = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.relu()\n"


def test_prompt_carries_reference_exemplars_protocol_and_requirements():
    prompt = build_prompt("class Model: pass", [Exemplar("class ModelNew: a = 1", 0.93), Exemplar("x = 2", 1.5)])
    assert "class Model: pass" in prompt
    assert "## Implementation 1 (speedup 0.93x)" in prompt and "## Implementation 2 (speedup 1.50x)" in prompt
    assert "Previous Implementations with Scores" in prompt
    for name in SECTIONS:
        assert f"## {name}" in prompt
    assert prompt.count("?") >= 5  # the five Performance Analysis questions
    for requirement in ("Match the reference", "compile and run", "Do not cache or reuse previous results",
                        "Keep hyperparameters"):
        assert requirement in prompt


def test_prompt_without_exemplars_says_so():
    assert prompt_text("no_exemplars").strip() in build_prompt("class Model: pass", [])


def test_round_trip():
    parsed = parse_response(render_response("1. a\n2. b", "fuse", PROGRAM))
    assert parsed.ok and parsed.well_formed
    assert parsed.code == PROGRAM
    assert parsed.sections["Algorithm Design"] == "fuse"


def test_missing_sections_are_reported_but_the_program_is_kept():
    parsed = parse_response(f"## Code Implementation\n```python\n{PROGRAM}```\n")
    assert parsed.ok and not parsed.well_formed
    assert "missing section: ## Performance Analysis" in parsed.errors
    assert "missing section: ## Algorithm Design" in parsed.errors


def test_no_code_block_is_fatal():
    parsed = parse_response("## Performance Analysis\nx\n## Algorithm Design\ny\n## Code Implementation\nnone")
    assert not parsed.ok and parsed.code is None
    assert "no fenced code block" in parsed.errors


def test_several_blocks_take_the_last_one():
    draft = PROGRAM.replace("relu", "sigmoid")
    text = render_response("a", "b", draft) + f"\nRevised:\n```python\n{PROGRAM}```\n"
    parsed = parse_response(text)
    assert parsed.ok and parsed.code == PROGRAM
    assert any("2 code blocks" in e for e in parsed.errors)


def test_truncated_response_is_fatal():
    text = render_response("a", "b", PROGRAM).rsplit("```", 1)[0]  # the closing fence never came
    parsed = parse_response(text)
    assert not parsed.ok and any("unclosed" in e for e in parsed.errors)


def test_program_without_model_new_is_fatal():
    parsed = parse_response(render_response("a", "b", "class Model:\n    pass\n"))
    assert not parsed.ok and any("ModelNew" in e for e in parsed.errors)


def test_block_outside_its_section_is_used_and_reported():
    text = f"## Performance Analysis\n```python\n{PROGRAM}```\n## Algorithm Design\nb\n## Code Implementation\n"
    parsed = parse_response(text)
    assert parsed.ok and "code block outside ## Code Implementation" in parsed.errors


def test_headings_are_case_and_level_tolerant():
    text = f"### performance analysis\na\n## ALGORITHM DESIGN\nb\n## Code Implementation:\n```\n{PROGRAM}```"
    assert parse_response(text).well_formed
