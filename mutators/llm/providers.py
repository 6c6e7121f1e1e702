"""The LLM providers: the Anthropic SDK and OpenAI-compatible servers, one reply type, prices."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any


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
                "items": {
                    "type": "object",
                    "properties": {"search": {"type": "string"}, "replace": {"type": "string"}},
                    "required": ["search", "replace"],
                },
            },
            "rationale": {"type": "string", "description": "one line: what changed and why it should be faster"},
        },
        "required": ["rationale"],
    },
}


#: how a reply's `error` starts when no request was sent (no time or money left for one): not
#: a failure of the API, so it does not count towards switching the operator off
NOT_STARTED = "not started: "


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


def _affordable(
    max_tokens: int, text_bytes: int, tokens_per_byte: float, p_in: float, p_out: float, money_left: float | None
) -> tuple[int, str]:
    """The max_tokens a request may ask for so that its worst case (the prompt, estimated from
    its size at `tokens_per_byte` and priced as input, plus every output token allowed) costs
    no more than `money_left`; (0, why) when not even a useful answer fits (1024 tokens, or
    max_tokens if less)."""
    if money_left is None:
        return max_tokens, ""
    prompt_usd = text_bytes * tokens_per_byte * p_in / 1e6
    room = max_tokens if p_out <= 0 else int((money_left - prompt_usd) * 1e6 / p_out)
    if room >= min(max_tokens, 1024):
        return min(max_tokens, room), ""
    return 0, (
        f"{NOT_STARTED}its worst-case cost (the prompt, about ${prompt_usd:.4f}, and "
        f"{min(max_tokens, 1024)} output tokens) exceeds the ${max(money_left, 0.0):.4f} left of the cost budget"
    )


def _request_bytes(system: list[dict[str, Any]], prompt: str, tool: dict[str, Any]) -> int:
    import json

    return len(json.dumps(system).encode()) + len(prompt.encode()) + len(json.dumps(tool).encode())


def _price(model: str) -> tuple[float, float, float, float]:
    for prefix, price in PRICES.items():
        if model.startswith(prefix):
            return price
    return PRICES["claude-sonnet"]


class AnthropicProvider:
    """Calls the Messages API through the official SDK: its retries (with backoff, honouring
    retry-after) for 408/409/429/5xx, timeouts and connection errors, then one answer or an
    error. A permanent error (401, 403, 404, a 400 naming the model) switches the provider off:
    `available()` says why from then on, and no more calls are made.

    Each attempt waits at most `connect_s` for the connection and `timeout_s` for the answer
    (the SDK's `timeout`); a call makes `max_retries` retries (the SDK's), none while the last
    call failed (an API that is down is not waited on three times a proposal): a stalled API
    holds a call at most (max_retries + 1) x timeout_s, 6 minutes by default, then timeout_s.
    `complete(money_left=...)` sends no request whose worst case could cost more."""

    name = "anthropic"

    def __init__(
        self,
        model: str = "claude-sonnet-5",
        *,
        api_key: str | None = None,
        client: Any = None,
        prices: tuple[float, float, float, float] | None = None,
        max_tokens: int = 8192,
        temperature: float | None = None,
        effort: str | None = None,
        max_retries: int = 2,
        timeout_s: float = 120.0,
        connect_s: float = 10.0,
    ) -> None:
        self.model, self.max_tokens, self.temperature, self.effort = model, max_tokens, temperature, effort
        self.prices = prices or _price(model)
        self.api_key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        self._client = client
        self.max_retries, self.timeout_s, self.connect_s = max_retries, timeout_s, connect_s
        self.failing = False  # the last call failed (after its retries): the next makes none
        # prompt tokens per byte of the request, for the worst case of its cost: a cautious
        # guess (code runs at about 0.3), raised to the most any answer reported
        self.tokens_per_byte = 0.5
        # why calls stopped for good (a bad key, no access, no such model): set by the first
        # such answer, so no call after it is paid for or waited on
        self.off: str | None = None

    def available(self) -> str | None:
        """None if calls can be made, else why not (one line)."""
        if self.off is not None:
            return self.off
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

            self._client = anthropic.Anthropic(
                api_key=self.api_key, max_retries=self.max_retries, timeout=self._timeout(self.timeout_s)
            )
        return self._client

    def _timeout(self, seconds: float) -> Any:
        import anthropic

        return anthropic.Timeout(seconds, connect=min(self.connect_s, seconds))

    def complete(
        self,
        system: list[dict[str, Any]],
        prompt: str,
        *,
        tool: dict[str, Any] | None = None,
        time_left: float | None = None,
        money_left: float | None = None,
    ) -> LLMReply:
        """One answer through `tool` (default: submit_kernel; another tool's arguments come
        back in `fields`), or a reply whose `error` says why not: never an exception.

        Each attempt waits at most `timeout_s` (the SDK's timeout, on connecting and on each
        read); with `time_left` (seconds of the run's wall time) attempts and retries are cut
        so that all of them end within it. With `money_left` (USD), max_tokens is cut so that
        the request's worst case fits in it, and no request is sent if a useful one cannot."""
        try:
            reply = self._complete(system, prompt, tool or _TOOL, time_left, money_left)
        except Exception as exc:  # a response the SDK could not parse (truncated JSON), ...
            reply = LLMReply(error=f"malformed API response: {type(exc).__name__}: {str(exc)[:200]}")
        if not reply.error.startswith(NOT_STARTED):
            self.failing = bool(reply.error) and not reply.output_tokens
        return reply

    def _client_within(self, time_left: float | None) -> Any:
        """The client, with a per-call timeout and retries that fit in `time_left` (no retries
        while the API is failing)."""
        client = self.client
        retries = 0 if self.failing else getattr(client, "max_retries", self.max_retries)
        if time_left is None:
            return client.with_options(timeout=self._timeout(self.timeout_s), max_retries=retries)
        per_call = min(self.timeout_s, time_left)
        # (retries + 1) attempts of at most per_call seconds each, within time_left
        retries = max(0, min(retries, int(time_left // per_call) - 1))
        return client.with_options(timeout=self._timeout(per_call), max_retries=retries)

    def _complete(
        self,
        system: list[dict[str, Any]],
        prompt: str,
        tool: dict[str, Any],
        time_left: float | None,
        money_left: float | None = None,
    ) -> LLMReply:
        import anthropic

        if time_left is not None and time_left < 1.0:
            return LLMReply(error=f"{NOT_STARTED}no time left in the run's wall-time budget")
        size = _request_bytes(system, prompt, tool)
        p_in, p_out, p_write, _ = self.prices
        max_tokens, why = _affordable(
            self.max_tokens, size, self.tokens_per_byte, max(p_in, p_write), p_out, money_left
        )
        if why:
            return LLMReply(error=why)
        client = self._client_within(time_left)

        kwargs: dict[str, Any] = {}
        accepted = _create_params(self.client)
        for key, value in (
            ("temperature", self.temperature),
            ("output_config", {"effort": self.effort} if self.effort else None),
        ):
            if value is None:
                continue
            if key in accepted:
                kwargs[key] = value
            else:  # an SDK that no longer names it: sent as it is, the API decides
                kwargs.setdefault("extra_body", {})[key] = value
        try:
            msg = client.messages.create(
                model=self.model,
                max_tokens=max_tokens,
                system=system,
                messages=[{"role": "user", "content": prompt}],
                tools=[tool],
                tool_choice={"type": "tool", "name": tool["name"]},
                **kwargs,
            )
        except anthropic.APIStatusError as exc:
            why = f"API error {exc.status_code}: {str(exc)[:200]}"
            if _permanent(exc, self.model):
                self.off = why
                return LLMReply(error=why)
            if _retryable(exc.status_code) and getattr(client, "max_retries", 0):
                why = f"API error {exc.status_code} after retries: {str(exc)[:200]}"
            return LLMReply(error=why)
        except anthropic.APIConnectionError as exc:
            return LLMReply(error=f"connection failed after retries: {type(exc).__name__}: {str(exc)[:200]}")
        except anthropic.APIResponseValidationError as exc:
            return LLMReply(error=f"malformed API response: {str(exc)[:200]}")
        except anthropic.APIError as exc:
            return LLMReply(error=f"API error: {type(exc).__name__}: {str(exc)[:200]}")
        usage = msg.usage
        reply = LLMReply(
            stop_reason=str(msg.stop_reason or ""),
            input_tokens=int(usage.input_tokens or 0),
            output_tokens=int(usage.output_tokens or 0),
            cache_write_tokens=int(getattr(usage, "cache_creation_input_tokens", 0) or 0),
            cache_read_tokens=int(getattr(usage, "cache_read_input_tokens", 0) or 0),
        )
        prompt_tokens = reply.input_tokens + reply.cache_write_tokens + reply.cache_read_tokens
        self.tokens_per_byte = min(1.0, max(self.tokens_per_byte, prompt_tokens / max(size, 1)))
        p_in, p_out, p_write, p_read = self.prices
        reply.cost_usd = (
            reply.input_tokens * p_in
            + reply.output_tokens * p_out
            + reply.cache_write_tokens * p_write
            + reply.cache_read_tokens * p_read
        ) / 1e6
        if reply.stop_reason == "max_tokens":
            reply.error = f"truncated answer (max_tokens {max_tokens} reached)"
            return reply
        call = next(
            (b for b in msg.content if getattr(b, "type", "") == "tool_use" and getattr(b, "name", "") == tool["name"]),
            None,
        )
        if call is None or not isinstance(call.input, dict):
            reply.error = f"the answer holds no {tool['name']} call"
            return reply
        if tool is not _TOOL:
            reply.fields = dict(call.input)
            return reply
        return _answer(reply, call.input)


def _retryable(status: int) -> bool:
    """The statuses the SDK retries (besides an explicit x-should-retry header)."""
    return status in (408, 409, 429) or status >= 500


def _permanent(exc: Any, model: str) -> bool:
    """An error no later call can get past in this run: a bad key (401), no access (403), no
    such model (404), or a request the API rejects for its model (400 naming the model)."""
    import anthropic

    if isinstance(exc, (anthropic.AuthenticationError, anthropic.PermissionDeniedError, anthropic.NotFoundError)):
        return True
    if isinstance(exc, anthropic.BadRequestError):
        text = str(exc)
        return model in text or re.search(r"\bmodel\b", text, re.IGNORECASE) is not None
    return False


class OpenAICompatibleProvider:
    """Any endpoint speaking the OpenAI Chat Completions API: a model served locally by SGLang
    or vLLM, or a hosted one. The answer comes as a `submit_kernel` function call, or, from
    servers without tool calling, as a fenced Python block. Retries 408/409/429/5xx and
    connection errors with exponential backoff (honouring Retry-After), then gives up with a
    reason. `prices` in USD per million (input, output) tokens; local models cost nothing."""

    name = "openai-compatible"

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None = None,
        max_tokens: int = 8192,
        temperature: float | None = None,
        max_retries: int = 3,
        timeout_s: float = 300.0,
        prices: tuple[float, float] = (0.0, 0.0),
        backoff_s: float = 0.5,
    ) -> None:
        self.model, self.base_url = model, base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.max_tokens, self.temperature, self.max_retries = max_tokens, temperature, max_retries
        self.timeout_s, self.prices, self.backoff_s = timeout_s, prices, backoff_s
        self.failing = False  # the last call failed (after its retries): the next makes none
        self.tokens_per_byte = 0.5  # as AnthropicProvider's

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
        retries = 0 if self.failing else self.max_retries
        for attempt in range(retries + 1):
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
            if attempt < retries:
                if deadline is not None:
                    wait = min(wait, max(0.0, deadline - time.monotonic()))
                time.sleep(wait)
        return None, f"{error} (after {retries} retries)"

    def complete(
        self,
        system: list[dict[str, Any]],
        prompt: str,
        *,
        tool: dict[str, Any] | None = None,
        time_left: float | None = None,
        money_left: float | None = None,
    ) -> LLMReply:
        """One answer, or a reply whose `error` says why not (never an exception); every
        attempt and wait ends within `time_left` seconds when given; no request whose worst
        case could cost more than `money_left` (USD) is sent."""
        try:
            reply = self._complete(system, prompt, tool, time_left, money_left)
        except Exception as exc:
            reply = LLMReply(error=f"malformed API response: {type(exc).__name__}: {str(exc)[:200]}")
        if not reply.error.startswith(NOT_STARTED):
            self.failing = bool(reply.error) and not reply.output_tokens
        return reply

    def _complete(
        self,
        system: list[dict[str, Any]],
        prompt: str,
        tool: dict[str, Any] | None,
        time_left: float | None,
        money_left: float | None = None,
    ) -> LLMReply:
        import json

        spec = tool or _TOOL
        size = _request_bytes(system, prompt, spec)
        max_tokens, why = _affordable(
            self.max_tokens, size, self.tokens_per_byte, self.prices[0], self.prices[1], money_left
        )
        if why:
            return LLMReply(error=why)
        fn_tool = {
            "type": "function",
            "function": {"name": spec["name"], "description": spec["description"], "parameters": spec["input_schema"]},
        }
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "tools": [fn_tool],
            "tool_choice": {"type": "function", "function": {"name": spec["name"]}},
            "messages": [
                {"role": "system", "content": "\n\n".join(b["text"] for b in system)},
                {"role": "user", "content": prompt},
            ],
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
        reply = LLMReply(
            stop_reason=str(choice.get("finish_reason") or ""),
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or 0),
        )
        self.tokens_per_byte = min(1.0, max(self.tokens_per_byte, reply.input_tokens / max(size, 1)))
        reply.cost_usd = (reply.input_tokens * self.prices[0] + reply.output_tokens * self.prices[1]) / 1e6
        if reply.stop_reason == "length":
            reply.error = f"truncated answer (max_tokens {max_tokens} reached)"
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
    if (
        isinstance(edits, list)
        and edits
        and all(
            isinstance(e, dict) and isinstance(e.get("search"), str) and isinstance(e.get("replace"), str)
            for e in edits
        )
    ):
        reply.edits = [{"search": e["search"], "replace": e["replace"]} for e in edits]
        return reply
    reply.error = "the submit_kernel call holds neither a source nor well-formed edits"
    return reply


def _create_params(client: Any) -> set[str]:
    import inspect

    try:
        return set(inspect.signature(client.messages.create).parameters)
    except (TypeError, ValueError):
        return set()
