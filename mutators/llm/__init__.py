"""An LLM rewrite operator: Claude rewrites a parent kernel's source (Anthropic SDK, extra `llm`).

The prompt holds the problem (its reference source, shapes, dtypes, roofline figures), the
parent's source and what was measured of it (latency per shape, or its error), a few elites
of the archive as inspirations, and lessons (any callable that returns text lines; the
knowledge base plugs in there). The stable part (instructions, problem) is marked for
prompt caching. The answer comes back through a tool call (`submit_kernel`: the whole new
module and a one-line rationale) and is validated before anything runs it: it must parse,
define `kernel` with the problem's arity, and keep the parent's `CONFIG` keys if the parent
had a `CONFIG` (so numeric mutators can go on tuning the new structure).

Failures are values, never exceptions out of `propose`: rate limits, overload, server errors
and timeouts go through the SDK's own retries with backoff, then the proposal is dropped
with a logged reason; truncated or malformed answers are dropped likewise. Tokens and
dollars of every call are counted and charged to the run (`Context.charge`), so a dollar
cap stops LLM calls, not the search. Without an API key the operator says so once and
proposes nothing (a search leaves it out: `available()`).

    from evokernel.mutators.llm import LLMRewrite
    op = LLMRewrite("examples/problems/matmul_bf16.py", provider=AnthropicProvider("claude-sonnet-5"))
    Search(space, evaluator, [op, PointMutation()], ...)
"""

from evokernel.mutators.llm.edits import apply_edits, validate_source
from evokernel.mutators.llm.operator import LLMRewrite
from evokernel.mutators.llm.providers import PRICES, AnthropicProvider, LLMReply, OpenAICompatibleProvider

__all__ = [
    "LLMRewrite",
    "AnthropicProvider",
    "OpenAICompatibleProvider",
    "LLMReply",
    "validate_source",
    "apply_edits",
    "PRICES",
]
