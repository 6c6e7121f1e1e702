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

from __future__ import annotations

import ast
import hashlib
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evokernel.judge.candidate import bind_config, config_of, space_of, why_space_invalid
from evokernel.core.genome import Genome
from evokernel.core.mutator import Context
from evokernel.judge.problem import Problem

__all__ = ["LLMRewrite", "AnthropicProvider", "OpenAICompatibleProvider", "LLMReply", "validate_source", "apply_edits",
           "PRICES"]

log = logging.getLogger("evokernel.llm")

#: USD per million tokens (input, output, cache write, cache read), by model-name prefix, the
#: first that matches. List prices as published for the families' earlier models: pass
#: `prices=` to the provider where yours differ.
PRICES: dict[str, tuple[float, float, float, float]] = {
    "claude-opus": (15.0, 75.0, 18.75, 1.5),
    "claude-sonnet": (3.0, 15.0, 3.75, 0.3),
    "claude-haiku": (1.0, 5.0, 1.25, 0.1),
}

_TOOL = {
    "name": "submit_kernel",
    "description": "Submit the complete rewritten candidate module (Python source defining `kernel`).",
    "input_schema": {
        "type": "object",
        "properties": {
            "source": {"type": "string", "description": "the whole new module, ready to import (or give edits)"},
            "edits": {
                "type": "array",
                "description": "instead of source: search/replace edits applied in order to the candidate you were "
                               "given; each search text must occur in it exactly once",
                "items": {"type": "object", "properties": {"search": {"type": "string"}, "replace": {"type": "string"}},
                          "required": ["search", "replace"]},
            },
            "rationale": {"type": "string", "description": "one line: what changed and why it should be faster"},
        },
        "required": ["rationale"],
    },
}

_INSTRUCTIONS = """You optimise GPU kernels. You are given a problem (a reference implementation in \
PyTorch and the shapes it runs at) and a candidate module that computes it. Write a faster \
candidate: a complete Python module that defines `kernel(*inputs)` returning exactly what the \
reference returns (same shapes, dtypes, device), written with Triton and/or PyTorch. It is \
checked against the reference on fresh random inputs, every call; then timed on the GPU. \
Do not cache results, skip work, use other streams or threads, or touch the timing: such \
kernels are rejected. If the candidate defines CONFIG (a literal dict of tunable parameters), \
keep CONFIG with at least the same keys and read the tunables from it: the search tunes them. \
A new structure may bring tunables of its own: add them to CONFIG and declare the values worth \
trying in a literal SPACE dict (e.g. SPACE = {"UNROLL": [1, 2, 4]}, with CONFIG's value among \
them); the search tries them before it judges the structure. Submit the whole module \
(`source`) or search/replace `edits` to the candidate, with the submit_kernel tool."""


@dataclass
class LLMReply:
    source: str = ""
    edits: list[dict[str, str]] = field(default_factory=list)  # search/replace edits instead of a source
    rationale: str = ""
    stop_reason: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float = 0.0
    error: str = ""  # why there is no usable answer (the call failed, or the answer is unusable)
    fields: dict[str, Any] = field(default_factory=dict)  # the arguments of a call to another tool than submit_kernel


def _price(model: str) -> tuple[float, float, float, float]:
    for prefix, price in PRICES.items():
        if model.startswith(prefix):
            return price
    return PRICES["claude-sonnet"]


class AnthropicProvider:
    """Calls the Messages API through the official SDK: its retries (with backoff, honouring
    retry-after) for 408/409/429/5xx and connection errors, then one answer or an error."""

    name = "anthropic"

    def __init__(self, model: str = "claude-sonnet-5", *, api_key: str | None = None, client: Any = None,
                 prices: tuple[float, float, float, float] | None = None,
                 max_tokens: int = 8192, temperature: float | None = None, effort: str | None = None,
                 max_retries: int = 4, timeout_s: float = 180.0) -> None:
        self.model, self.max_tokens, self.temperature, self.effort = model, max_tokens, temperature, effort
        self.prices = prices or _price(model)
        self.api_key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        self._client = client
        self.max_retries, self.timeout_s = max_retries, timeout_s

    def available(self) -> str | None:
        """None if calls can be made, else why not (one line)."""
        if self._client is not None or self.api_key:
            try:
                import anthropic  # noqa: F401
            except ImportError:
                return "the anthropic package is not installed (pip install 'evokernel[llm]')"
            return None
        return "no ANTHROPIC_API_KEY"

    @property
    def client(self) -> Any:
        if self._client is None:
            import anthropic

            self._client = anthropic.Anthropic(api_key=self.api_key, max_retries=self.max_retries,
                                               timeout=self.timeout_s)
        return self._client

    def complete(self, system: list[dict[str, Any]], prompt: str, *, tool: dict[str, Any] | None = None,
                 time_left: float | None = None) -> LLMReply:
        """One answer through `tool` (default: submit_kernel; another tool's arguments come
        back in `fields`), or a reply whose `error` says why not: never an exception.

        Each attempt waits at most `timeout_s` (the SDK's timeout, on connecting and on each
        read); with `time_left` (seconds of the run's wall time) attempts and retries are cut
        so that all of them end within it."""
        try:
            return self._complete(system, prompt, tool or _TOOL, time_left)
        except Exception as exc:  # a response the SDK could not parse (truncated JSON), ...
            return LLMReply(error=f"malformed API response: {type(exc).__name__}: {str(exc)[:200]}")

    def _client_within(self, time_left: float | None) -> Any:
        """The client, with a per-call timeout and retries that fit in `time_left`."""
        client = self.client
        if time_left is None:
            return client.with_options(timeout=self.timeout_s)
        per_call = min(self.timeout_s, time_left)
        retries = getattr(client, "max_retries", self.max_retries)
        # (retries + 1) attempts of at most per_call seconds each, within time_left
        retries = max(0, min(retries, int(time_left // per_call) - 1))
        return client.with_options(timeout=per_call, max_retries=retries)

    def _complete(self, system: list[dict[str, Any]], prompt: str, tool: dict[str, Any],
                  time_left: float | None) -> LLMReply:
        import anthropic

        if time_left is not None and time_left < 1.0:
            return LLMReply(error="no time left in the run's wall-time budget")
        client = self._client_within(time_left)

        kwargs: dict[str, Any] = {}
        accepted = _create_params(self.client)
        for key, value in (("temperature", self.temperature),
                           ("output_config", {"effort": self.effort} if self.effort else None)):
            if value is None:
                continue
            if key in accepted:
                kwargs[key] = value
            else:  # an SDK that no longer names it: sent as it is, the API decides
                kwargs.setdefault("extra_body", {})[key] = value
        try:
            msg = client.messages.create(
                model=self.model, max_tokens=self.max_tokens, system=system,
                messages=[{"role": "user", "content": prompt}], tools=[tool],
                tool_choice={"type": "tool", "name": tool["name"]}, **kwargs,
            )
        except anthropic.APIStatusError as exc:
            return LLMReply(error=f"API error {exc.status_code} after retries: {str(exc)[:200]}")
        except anthropic.APIConnectionError as exc:
            return LLMReply(error=f"connection failed after retries: {type(exc).__name__}: {str(exc)[:200]}")
        except anthropic.APIResponseValidationError as exc:
            return LLMReply(error=f"malformed API response: {str(exc)[:200]}")
        except anthropic.APIError as exc:
            return LLMReply(error=f"API error: {type(exc).__name__}: {str(exc)[:200]}")
        usage = msg.usage
        reply = LLMReply(
            stop_reason=str(msg.stop_reason or ""),
            input_tokens=int(usage.input_tokens or 0), output_tokens=int(usage.output_tokens or 0),
            cache_write_tokens=int(getattr(usage, "cache_creation_input_tokens", 0) or 0),
            cache_read_tokens=int(getattr(usage, "cache_read_input_tokens", 0) or 0),
        )
        p_in, p_out, p_write, p_read = self.prices
        reply.cost_usd = (reply.input_tokens * p_in + reply.output_tokens * p_out
                          + reply.cache_write_tokens * p_write + reply.cache_read_tokens * p_read) / 1e6
        if reply.stop_reason == "max_tokens":
            reply.error = f"truncated answer (max_tokens {self.max_tokens} reached)"
            return reply
        call = next((b for b in msg.content if getattr(b, "type", "") == "tool_use"
                     and getattr(b, "name", "") == tool["name"]), None)
        if call is None or not isinstance(call.input, dict):
            reply.error = f"the answer holds no {tool['name']} call"
            return reply
        if tool is not _TOOL:
            reply.fields = dict(call.input)
            return reply
        return _answer(reply, call.input)


class OpenAICompatibleProvider:
    """Any endpoint speaking the OpenAI Chat Completions API: a model served locally by SGLang
    or vLLM, or a hosted one. The answer comes as a `submit_kernel` function call, or, from
    servers without tool calling, as a fenced Python block. Retries 408/409/429/5xx and
    connection errors with exponential backoff (honouring Retry-After), then gives up with a
    reason. `prices` in USD per million (input, output) tokens; local models cost nothing."""

    name = "openai-compatible"

    def __init__(self, model: str, base_url: str, *, api_key: str | None = None, max_tokens: int = 8192,
                 temperature: float | None = None, max_retries: int = 3, timeout_s: float = 300.0,
                 prices: tuple[float, float] = (0.0, 0.0), backoff_s: float = 0.5) -> None:
        self.model, self.base_url = model, base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.max_tokens, self.temperature, self.max_retries = max_tokens, temperature, max_retries
        self.timeout_s, self.prices, self.backoff_s = timeout_s, prices, backoff_s

    def available(self) -> str | None:
        return None if self.base_url else "no endpoint URL"

    def _post(self, body: dict[str, Any], time_left: float | None = None) -> tuple[dict[str, Any] | None, str]:
        import json
        import time
        import urllib.error
        import urllib.request

        deadline = None if time_left is None else time.monotonic() + time_left

        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode()
        error = ""
        for attempt in range(self.max_retries + 1):
            wait = self.backoff_s * 2**attempt
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left < 1.0:
                error = error or "no time left in the run's wall-time budget"
                break
            try:
                req = urllib.request.Request(f"{self.base_url}/chat/completions", data=data, headers=headers)
                with urllib.request.urlopen(req, timeout=min(self.timeout_s, left or self.timeout_s)) as resp:
                    return json.loads(resp.read()), ""
            except urllib.error.HTTPError as exc:
                error = f"HTTP {exc.code}: {exc.read()[:200].decode('utf-8', 'replace')}"
                if exc.code not in (408, 409, 429) and exc.code < 500:
                    return None, error
                retry_after = exc.headers.get("retry-after") if exc.headers else None
                if retry_after:
                    try:
                        wait = min(60.0, float(retry_after))
                    except ValueError:
                        pass
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                error = f"connection failed: {type(exc).__name__}: {exc}"
            except ValueError as exc:
                return None, f"malformed response: {exc}"
            if attempt < self.max_retries:
                if deadline is not None:
                    wait = min(wait, max(0.0, deadline - time.monotonic()))
                time.sleep(wait)
        return None, f"{error} (after {self.max_retries} retries)"

    def complete(self, system: list[dict[str, Any]], prompt: str, *, tool: dict[str, Any] | None = None,
                 time_left: float | None = None) -> LLMReply:
        """One answer, or a reply whose `error` says why not (never an exception); every
        attempt and wait ends within `time_left` seconds when given."""
        try:
            return self._complete(system, prompt, tool, time_left)
        except Exception as exc:
            return LLMReply(error=f"malformed API response: {type(exc).__name__}: {str(exc)[:200]}")

    def _complete(self, system: list[dict[str, Any]], prompt: str, tool: dict[str, Any] | None,
                  time_left: float | None) -> LLMReply:
        import json

        spec = tool or _TOOL
        fn_tool = {"type": "function", "function": {"name": spec["name"], "description": spec["description"],
                                                     "parameters": spec["input_schema"]}}
        body: dict[str, Any] = {
            "model": self.model, "max_tokens": self.max_tokens, "tools": [fn_tool],
            "tool_choice": {"type": "function", "function": {"name": spec["name"]}},
            "messages": [{"role": "system", "content": "\n\n".join(b["text"] for b in system)},
                         {"role": "user", "content": prompt}],
        }
        if self.temperature is not None:
            body["temperature"] = self.temperature
        data, error = self._post(body, time_left)
        if data is None:
            return LLMReply(error=f"API error: {error}")
        try:
            choice = data["choices"][0]
            message = choice.get("message") or {}
            usage = data.get("usage") or {}
        except (KeyError, IndexError, TypeError, AttributeError):
            return LLMReply(error="malformed API response: no choices")
        reply = LLMReply(stop_reason=str(choice.get("finish_reason") or ""),
                         input_tokens=int(usage.get("prompt_tokens") or 0),
                         output_tokens=int(usage.get("completion_tokens") or 0))
        reply.cost_usd = (reply.input_tokens * self.prices[0] + reply.output_tokens * self.prices[1]) / 1e6
        if reply.stop_reason == "length":
            reply.error = f"truncated answer (max_tokens {self.max_tokens} reached)"
            return reply
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            if fn.get("name") == spec["name"]:
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    reply.error = f"the {spec['name']} call's arguments are not JSON"
                    return reply
                if spec is not _TOOL:
                    reply.fields = args if isinstance(args, dict) else {}
                    return reply
                if isinstance(args, dict) and (isinstance(args.get("source"), str) or args.get("edits")):
                    return _answer(reply, args)
        if spec is not _TOOL:  # a server without tool calling answered in prose
            text = str(message.get("content") or "").strip()
            if text:
                reply.fields = {"text": text}
            else:
                reply.error = f"the answer holds no {spec['name']} call and no text"
            return reply
        block = re.search(r"```(?:python)?\n(.*?)```", str(message.get("content") or ""), re.S)
        if block:
            reply.source, reply.rationale = block.group(1), "(from a fenced block)"
            return reply
        reply.error = "the answer holds no submit_kernel call and no Python block"
        return reply


def _answer(reply: LLMReply, args: dict[str, Any]) -> LLMReply:
    """Fills `reply` from a submit_kernel call's arguments: a source, or well-formed edits."""
    reply.rationale = str(args.get("rationale", ""))[:300]
    if isinstance(args.get("source"), str) and args["source"].strip():
        reply.source = args["source"]
        return reply
    edits = args.get("edits")
    if isinstance(edits, list) and edits and all(
            isinstance(e, dict) and isinstance(e.get("search"), str) and isinstance(e.get("replace"), str)
            for e in edits):
        reply.edits = [{"search": e["search"], "replace": e["replace"]} for e in edits]
        return reply
    reply.error = "the submit_kernel call holds neither a source nor well-formed edits"
    return reply


def apply_edits(source: str, edits: Sequence[Mapping[str, str]]) -> tuple[str, str | None]:
    r"""`source` with search/replace `edits` applied in order, and None; or the source
    unchanged and why an edit cannot apply (its search text is missing, empty or ambiguous).

    >>> apply_edits("a = 1\nb = 2\n", [{"search": "b = 2", "replace": "b = 3"}])
    ('a = 1\nb = 3\n', None)
    >>> apply_edits("a = 1\n", [{"search": "c = 1", "replace": "c = 2"}])[1]
    'edit 1: its search text is not in the candidate'
    """
    out = source
    for i, edit in enumerate(edits, 1):
        search = edit.get("search", "")
        if not search:
            return source, f"edit {i}: empty search text"
        found = out.count(search)
        if found == 0:
            return source, f"edit {i}: its search text is not in the candidate"
        if found > 1:
            return source, f"edit {i}: its search text occurs {found} times in the candidate"
        out = out.replace(search, edit.get("replace", ""), 1)
    return out, None


def _create_params(client: Any) -> set[str]:
    import inspect

    try:
        return set(inspect.signature(client.messages.create).parameters)
    except (TypeError, ValueError):
        return set()


def validate_source(source: str, *, arity: int | None = None, config_keys: Sequence[str] | None = None,
                    known: Sequence[str] | None = None) -> str | None:
    """None if `source` may be judged, else why not: it must parse, define a top-level
    `kernel` taking `arity` positional inputs, keep `CONFIG` with (at least) `config_keys`,
    and declare in `SPACE` every new `CONFIG` key that is not a parameter of the search
    (`known`; None: no new keys are checked)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"does not parse: {exc.msg} (line {exc.lineno})"
    kernel = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "kernel"), None)
    if kernel is None:
        return "defines no top-level function `kernel`"
    args = kernel.args
    if arity is not None and not args.vararg:
        positional = len(args.posonlyargs) + len(args.args)
        required = positional - len(args.defaults)
        if not required <= arity <= positional:
            return f"`kernel` takes {positional} inputs, the problem gives {arity}"
    if config_keys:
        config = next((n for n in tree.body if isinstance(n, ast.Assign)
                       and any(isinstance(t, ast.Name) and t.id == "CONFIG" for t in n.targets)), None)
        if config is None or not isinstance(config.value, ast.Dict):
            return "dropped its CONFIG dict (the tunable parameters)"
        keys = {k.value for k in config.value.keys if isinstance(k, ast.Constant)}
        if not set(config_keys) <= keys:
            return f"CONFIG keys dropped: {sorted(set(config_keys) - keys)}"
    if known is not None:
        why = why_space_invalid(source, known=list(known) + list(config_keys or ()))
        if why is not None:
            return why
    return None


def _normal(source: str) -> str:
    """A source without trailing spaces and blank-line differences: two answers equal here
    are the same kernel."""
    return "\n".join(line.rstrip() for line in source.strip().splitlines() if line.strip())


def _config_keys(source: str) -> list[str] | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CONFIG" for t in n.targets) \
                and isinstance(n.value, ast.Dict):
            return [k.value for k in n.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return None


@dataclass
class _Stats:
    calls: int = 0
    proposed: int = 0
    repairs: int = 0
    tuned: int = 0  # variants of new structures' own tunables (SPACE), proposed without a call
    dropped: dict[str, int] = field(default_factory=dict)
    cost_usd: float = 0.0
    tokens: dict[str, int] = field(default_factory=lambda: {"input": 0, "output": 0, "cache_write": 0,
                                                            "cache_read": 0})


class LLMRewrite:
    """Mutator: asks an LLM to rewrite the parent's kernel source (see the module's doc).

    `render` turns a genome into its candidate source (a genome carrying its own source is
    used as it is); `lessons(problem, parent)` returns text lines for the prompt;
    `measured(genome)` what is known of a genome's results (a dict: latency per shape, error)."""

    arity = 1
    costly = True

    def __init__(self, problem: Problem | str | os.PathLike[str], *, provider: Any | Sequence[Any] = None,
                 render: Callable[[Genome], str] | None = None, name: str = "llm-rewrite", inspirations: int = 2,
                 repairs: int = 2,
                 lessons: Callable[[Problem, Genome], list[str]] | None = None,
                 measured: Callable[[Genome], dict[str, Any]] | None = None, inputs: int | None = None,
                 tune: int = 6) -> None:
        self.problem = problem if isinstance(problem, Problem) else Problem.load(problem)
        # several providers (models) are mixed by Thompson sampling on their gains per dollar
        providers = list(provider) if isinstance(provider, (list, tuple)) else [provider or AnthropicProvider()]
        self.providers = providers
        self.provider = providers[0]
        self._model_stats = [{"calls": 0, "gains": 0.0, "cost": 0.0} for _ in providers]
        self._child_of: dict[str, tuple[int, float | None]] = {}  # child id -> (provider, parent latency)
        self.render, self.name, self.inspirations = render, name, inspirations
        self.lessons, self.measured, self.inputs = lessons, measured, inputs  # inputs: the problem's arity
        self.stats = _Stats()
        self._said_off = False
        self.last_prompt = ""
        # repair mode: a rewrite of ours that failed to compile or failed the gate goes back
        # with its error, at most `repairs` times along one line of fixes
        self.repairs = repairs
        self._mine: dict[str, int] = {}  # genome id -> repairs already spent on its line
        self._to_repair: list[tuple[Genome, str, int]] = []
        self._seen: dict[str, dict[str, Any]] = {}  # what was measured of each genome (for prompts)
        # a new structure with tunables of its own (SPACE) gets up to `tune` variants of them,
        # proposed without a call once the structure passed the gate, so it is not judged on
        # the one configuration the model happened to write
        self.tune = tune
        self._structures: dict[str, dict[str, list[Any]]] = {}  # child id -> its own SPACE
        self._to_tune: list[Genome] = []
        # a model that answers with a kernel it already gave (or the parent unchanged) is not
        # asked again at once: the next prompts name those answers and ask for something
        # different, and after n repeats in a row the next 2**n - 1 proposals make no call
        self._answers: dict[str, str] = {}  # genomes the model's answers became
        self._repeats: list[str] = []  # genomes the model answered with again (named in prompts)
        self._in_a_row = 0
        self._pause = 0

    def reset(self) -> None:
        self._answers.clear()
        self._repeats.clear()
        self._in_a_row = self._pause = 0
        self._structures.clear()
        self._to_tune.clear()
        self._child_of.clear()
        self._mine.clear()
        self._to_repair.clear()
        self._seen.clear()

    def observe(self, genome: Genome, result: Any) -> None:
        """Remember what was measured; queue our own failed rewrites for repair."""
        if result.is_ok:
            self._seen[genome.id] = {"latency_ms": result.latency_ms, "per_shape": dict(result.per_shape)}
        else:
            self._seen[genome.id] = {"status": result.status.value, "error": result.error[:800]}
        origin = self._child_of.pop(genome.id, None)
        if origin is not None:
            which, parent_ms = origin
            if result.is_ok and parent_ms and result.latency_ms < parent_ms:
                self._model_stats[which]["gains"] += 1.0
        own = self._structures.pop(genome.id, None)
        if own and result.is_ok:
            self._queue_variants(genome, own)
        spent = self._mine.get(genome.id)
        if spent is not None and not result.is_ok and spent < self.repairs:
            self._to_repair.append((genome, f"{result.status.value}: {result.error[:1500]}", spent))

    def available(self) -> str | None:
        reasons = [p.available() for p in self.providers]
        return None if any(r is None for r in reasons) else "; ".join(dict.fromkeys(r for r in reasons if r))

    def _choose(self, rng: Any) -> int:
        """The provider for this call: a Beta draw of its gain rate (gains / calls) per mean
        dollar per call, so a cheap model that gains as often as a dear one wins; an unpriced
        (local) model counts a cent per call."""
        usable = [i for i, p in enumerate(self.providers) if p.available() is None]
        if len(usable) == 1:
            return usable[0]
        best, pick = -1.0, usable[0]
        for i in usable:
            st = self._model_stats[i]
            draw = rng.beta(1.0 + st["gains"], 1.0 + st["calls"] - st["gains"])
            per_call = max(st["cost"] / st["calls"], 0.01) if st["calls"] else 0.01
            if draw / per_call > best:
                best, pick = draw / per_call, i
        return pick

    def model_stats(self) -> list[dict[str, Any]]:
        return [{"model": getattr(p, "model", p.__class__.__name__), **st}
                for p, st in zip(self.providers, self._model_stats)]

    def _queue_variants(self, genome: Genome, own: dict[str, list[Any]]) -> None:
        """Up to `tune` other settings of a structure's own tunables, distinct, in a seeded
        random order (one-at-a-time moves first: the nearest settings are the likeliest)."""
        import itertools
        import random

        base = config_of(genome.source) or {}
        keys = sorted(own)
        singles = [{**{k: base.get(k) for k in keys}, key: v} for key in keys for v in own[key] if v != base.get(key)]
        combos = [dict(zip(keys, vs)) for vs in itertools.islice(itertools.product(*(own[k] for k in keys)), 4096)]
        rng = random.Random(genome.id)
        rng.shuffle(singles)
        rng.shuffle(combos)
        seen, picked = {tuple(base.get(k) for k in keys)}, []
        for values in singles + combos:
            key = tuple(values[k] for k in keys)
            if key not in seen and len(picked) < self.tune:
                seen.add(key)
                picked.append(values)
        for values in picked:
            child = Genome.of(dict(genome.params), source=bind_config(genome.source, values))
            self._to_tune.append(child.with_lineage((genome.id,), self.name, genome.lineage.generation))

    # -- prompt --------------------------------------------------------------------------
    def _source(self, genome: Genome) -> str:
        if genome.source and "def kernel" in genome.source:
            return bind_config(genome.source, genome.params)
        if self.render is None:
            raise ValueError("a genome without its own source needs `render`")
        return self.render(genome)

    def system(self) -> list[dict[str, Any]]:
        """The stable part of the prompt (cached): instructions and the problem."""
        p = self.problem
        ref = Path(p.path).read_text() if p.path and os.path.exists(p.path) else "(no source)"
        shapes = "\n".join(f"- {s}" for s in p.shapes)
        return [
            {"type": "text", "text": _INSTRUCTIONS},
            {"type": "text", "cache_control": {"type": "ephemeral"},
             "text": f"## Problem `{p.name}`\n\nReference module:\n```python\n{ref}\n```\n\nShapes tuned on:\n{shapes}\n"},
        ]

    def repair_prompt(self, failed: Genome, error: str) -> str:
        return (f"## Candidate that failed (genome {failed.id})\n```python\n{self._source(failed)}\n```\n\n"
                f"It was rejected with:\n```\n{error}\n```\n\nFix it, keeping its idea, and submit the whole "
                "module with submit_kernel.")

    def prompt(self, parent: Genome, ctx: Context) -> str:
        parts = [f"## Candidate to improve (genome {parent.id})\n```python\n{self._source(parent)}\n```"]
        measured = self.measured(parent) if self.measured is not None else self._seen.get(parent.id)
        if measured:
            parts.append(f"Measured: {measured}")
        elites = [e for e in ctx.archive.top() if e.genome.id != parent.id][: self.inspirations]
        for e in elites:
            parts.append(f"## Inspiration: an elite at {e.latency_ms:.5f} ms ({e.niche})\n"
                         f"```python\n{self._source(e.genome)}\n```")
        if self.lessons is not None:
            lines = [ln for ln in self.lessons(self.problem, parent) if ln]
            if lines:
                parts.append("## Lessons from earlier attempts\n" + "\n".join(f"- {ln}" for ln in lines))
        if self._repeats:
            parts.append("## Already submitted\nYour last answers repeated kernels already tried (genomes "
                         + ", ".join(dict.fromkeys(self._repeats[-4:])) + "). Submit a substantially different "
                         "kernel, not one of those again.")
        parts.append("Write a faster candidate and submit it with submit_kernel.")
        return "\n\n".join(parts)

    # -- the operator --------------------------------------------------------------------
    def _drop(self, why: str) -> None:
        key = why.split(":")[0][:60]
        self.stats.dropped[key] = self.stats.dropped.get(key, 0) + 1
        log.warning("%s: proposal dropped: %s", self.name, why)

    def propose(self, parents: Sequence[Genome], ctx: Context) -> Genome | None:
        off = self.available()
        if off is not None:
            if not self._said_off:
                log.warning("%s is off: %s", self.name, off)
                self._said_off = True
            return None
        if self._to_tune:  # a variant of a new structure's own tunables: no call
            self.stats.tuned += 1
            return self._to_tune.pop(0)
        if self._pause > 0:  # backing off a model that keeps repeating itself: no call
            self._pause -= 1
            return None
        repair = self._to_repair.pop(0) if self._to_repair else None
        parent = repair[0] if repair else parents[0]
        try:
            parent_source = self._source(parent)
        except Exception as exc:  # the user's render failed: this proposal's problem
            self._drop(f"render failed: {type(exc).__name__}: {exc}")
            return None
        self.last_prompt = self.repair_prompt(parent, repair[1]) if repair else self.prompt(parent, ctx)
        which = self._choose(ctx.rng)
        self.provider = self.providers[which]
        reply = self._call(self.provider, ctx)
        self._model_stats[which]["calls"] += 1
        self._model_stats[which]["cost"] += reply.cost_usd
        st = self.stats
        st.calls += 1
        st.cost_usd += reply.cost_usd
        for k, v in (("input", reply.input_tokens), ("output", reply.output_tokens),
                     ("cache_write", reply.cache_write_tokens), ("cache_read", reply.cache_read_tokens)):
            st.tokens[k] += v
        if reply.cost_usd:
            ctx.charge(reply.cost_usd, f"{self.name} {getattr(self.provider, 'model', '')}")
        if reply.error:
            self._drop(reply.error)
            return None
        source = reply.source
        if reply.edits:
            source, why = apply_edits(parent_source, reply.edits)
            if why is not None:
                self._drop(f"malformed edit: {why}")
                return None
        source = source if source.endswith("\n") else source + "\n"
        known = [p.name for p in ctx.space.params] if ctx.space is not None else None
        why = validate_source(source, config_keys=_config_keys(parent_source), known=known)
        if why is None:
            why = self._check_arity(source)
        if why is not None:
            self._drop(f"invalid source: {why}")
            return None
        st.proposed += 1
        digest = hashlib.sha256(source.encode()).hexdigest()[:12]
        log.info("%s: %s %s: %s", self.name, "repair" if repair else "proposal", digest,
                 re.sub(r"\s+", " ", reply.rationale)[:120])
        # the search's own parameters start where the model set them in CONFIG (if that is a
        # valid point of the space), else at the parent's
        params = dict(parent.params)
        config = config_of(source) or {}
        if ctx.space is not None:
            moved = {**params, **{k: v for k, v in config.items() if k in params}}
            if moved != params and ctx.space.why_invalid(moved) is None:
                params = moved
        child = Genome.of(params, source=source)
        if self._repeated(child, parent_source):
            st.proposed -= 1
            return None
        own = {k: v for k, v in (space_of(source) or {}).items() if k not in params}
        if own and self.tune > 0:
            self._structures[child.id] = own
        if repair:  # its parent is the failed genome it fixes, not the one the search offered
            child = child.with_lineage((parent.id,), self.name, ctx.generation)
        self._mine[child.id] = repair[2] + 1 if repair else 0
        parent_ms = (self._seen.get(parent.id) or {}).get("latency_ms")
        if parent_ms is None and not repair:
            best = ctx.archive.best()
            parent_ms = best.latency_ms if best is not None else None
        self._child_of[child.id] = (which, parent_ms)
        if repair:
            st.repairs += 1
        return child

    def _call(self, provider: Any, ctx: Context) -> LLMReply:
        """One call, within the run's remaining wall time; whatever goes wrong is a reply
        with an error."""
        import inspect

        kwargs: dict[str, Any] = {}
        left = ctx.seconds_left() if hasattr(ctx, "seconds_left") else None
        if left is not None:
            try:
                takes = "time_left" in inspect.signature(provider.complete).parameters
            except (TypeError, ValueError):
                takes = False
            if takes:
                kwargs["time_left"] = left
            elif left < 1.0:
                return LLMReply(error="no time left in the run's wall-time budget")
        try:
            return provider.complete(self.system(), self.last_prompt, **kwargs)
        except Exception as exc:  # a provider of the user's that raised
            return LLMReply(error=f"provider failed: {type(exc).__name__}: {str(exc)[:200]}")

    def _repeated(self, child: Genome, parent_source: str) -> bool:
        """Whether the answer is a kernel the run already has (an earlier answer, any genome
        measured, or the parent itself, unchanged): dropped, named in the next prompts, and
        the next calls held back (1, 3, 7, ... proposals after 1, 2, 3, ... repeats in a row)."""
        if _normal(self._source(child)) == _normal(parent_source):
            what = "the candidate to improve, unchanged"
        elif child.id in self._answers or child.id in self._seen:
            what = child.id
        else:
            self._answers[child.id] = child.id
            self._in_a_row = 0
            return False
        self._in_a_row += 1
        self._pause = 2 ** self._in_a_row - 1
        self._repeats.append(what)
        self._drop(f"repeated answer: {what} again ({self._in_a_row} in a row; the next {self._pause} "
                   "proposals make no call)")
        return True

    def _check_arity(self, source: str) -> str | None:
        if self.inputs is None:
            shape = self.problem.shapes[0] if self.problem.shapes else None
            try:
                self.inputs = len(self.problem.make_inputs(dict(shape), 0, "meta")) if shape else -1
            except Exception:
                self.inputs = -1  # the problem cannot make inputs on the meta device: the gate will tell
        return validate_source(source, arity=self.inputs) if self.inputs >= 0 else None
