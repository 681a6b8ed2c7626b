"""SFT targets carry a Performance Analysis: the author's where it wrote one, else one written from the measured
facts (what the program changes against the reference, its speedup, why it is plausibly faster, the fastest
implementation the prompt showed)."""

from __future__ import annotations

from cudal1.candidates import Candidate
from cudal1.generation.templates import template_source
from cudal1.pool import PoolEntry
from cudal1.prompts import parse_response
from cudal1.training.analysis import describe_change
from cudal1.training.data import sft_examples, tokenizer_texts
from cudal1.training.settings import PromptSettings


def _entry(problem, source: str, origin: str, speedup: float, analysis: str = "") -> PoolEntry:
    c = Candidate(problem.problem_id, source, origin)
    return PoolEntry(c.problem_id, c.candidate_id, c.sha256, source, origin, "ok", speedup, "", "corpus",
                     analysis=analysis)


def test_a_teachers_own_analysis_is_the_target(problems):
    p = problems[0]
    own = "1. The reference records an autograd graph nobody reads.\n2. Turn it off."
    corpus = [_entry(p, template_source(p, "no_grad"), "teacher:file", 1.3, analysis=own)]
    (row,) = sft_examples({p.problem_id: p}, corpus, PromptSettings(exemplars=0))
    parsed = parse_response(row["completion"])
    assert parsed.analysis == own and parsed.analysed


def test_otherwise_the_analysis_is_written_from_the_measured_facts(problems):
    p = problems[0]
    corpus = [_entry(p, template_source(p, "no_grad"), "template:no_grad", 1.31),
              _entry(p, template_source(p, "inference_mode"), "template:inference_mode", 1.02)]
    rows = sft_examples({p.problem_id: p}, corpus, PromptSettings(exemplars=2), copies=1)
    by_origin = {r["completion"].split("Approach: ")[1].split(".\n")[0]: parse_response(r["completion"]) for r in rows}
    fast, slow = by_origin["template:no_grad"], by_origin["template:inference_mode"]
    assert fast.analysed and slow.analysed  # what the learning stages require of a response
    # the fastest implementation shown, with its speedup and what it changes
    assert "1. Implementation 2 is the fastest shown (1.31x): it runs forward under torch.no_grad." in fast.analysis
    assert "2. This program runs forward under torch.no_grad: measured 1.31x against the reference." in fast.analysis
    assert "3. It is faster because no autograd graph is recorded." in fast.analysis
    assert "measured 1.02x" in slow.analysis and "3. Limit: at these sizes it stays near" in slow.analysis
    # the tiny policy's tokenizer learns these lines, so they cost the policy's answer few tokens
    texts = "\n".join(tokenizer_texts([p], corpus))
    assert fast.analysis.splitlines()[1] in texts and fast.analysis.splitlines()[0] in texts


def test_what_changed_is_read_from_the_source_where_the_origin_does_not_say():
    reference = "class Model:\n    def forward(self, a, B):\n        return torch.diag(a) @ B\n"
    kernel = "from torch.utils.cpp_extension import load_inline\nsrc = '__global__ void k() {}'\n"
    assert describe_change(reference, kernel, "teacher:cudal1-h100").what == "computes forward in a custom CUDA kernel"
    shortcut = describe_change(reference, "class ModelNew:\n    def forward(self, a, B):\n        return B * a.unsqueeze(1)\n",
                               "teacher:cudal1-h100")
    assert (shortcut.what, shortcut.why) == ("replaces diag, matmul by unsqueeze", "less work: diag, matmul no longer run")
    same = describe_change(reference, reference.replace("Model", "ModelNew"), "self_supervised-0")
    assert same.what == "rearranges the reference's operators"
    assert describe_change(reference, "not python (", "x").what == "drops diag, matmul"
