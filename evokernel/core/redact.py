"""What of a failed candidate's report may leave the judge: be stored, or be sent to a model.

A candidate can read files the judge can (a `.env` beside it, a key in a home folder) and
put what it read in its exception's message or in what it prints; in a search with a model,
a failure's text was stored in full and sent back to the model in the next repair prompt.
`redact_failure` keeps what the judge itself wrote and the shape of the candidate's own
traceback, and nothing else:

- the first line (the judge's reason: what failed, and where), cut at 400 characters;
- exception lines (`SomeError: message`), the message cut at 300 characters;
- a traceback's frames only where they are in the candidate's own file (the folder left
  out), without their source lines (the candidate's own code, which the model has);
- the judge's own notes; every other line (what the candidate printed, frames of other
  files) is left out and counted.

What is kept loses anything that looks like a secret: the value of `NAME=value` where the
name says KEY, TOKEN, SECRET, PASSWORD, ...; words of 16 characters or more that mix letters
and digits (keys, tokens, hashes), and any word of 32 or more. The whole is cut at 2,000
characters. A secret that looks like plain words and fits in 300 characters of an exception
message can still pass: the cut and the filter bound what leaves, they cannot read minds.

>>> text = "\\n".join([
...     "import: RuntimeError: sk-ant-api03-Zx81kQ2b9LmP0s7d leaked (M=48,N=40,K=64)",
...     "Traceback (most recent call last):",
...     '  File "/usr/lib/python3.11/runpy.py", line 88, in _run_code',
...     "    exec(code, run_globals)",
...     '  File "/tmp/evokernel-candidate-x1/evokernel_candidate.py", line 4, in <module>',
...     "    raise RuntimeError(open('/root/.env').read())",
...     "RuntimeError: ANTHROPIC_API_KEY=sk-ant-api03-Zx81kQ2b9LmP0s7d",
...     "root:$6$Qm1b2c3d4e5f6g7h$Xy9AbCdEfGh1JkLmNoP2:19000:0:99999:7:::",
... ])
>>> print(redact_failure(text))
import: RuntimeError: [redacted] leaked (M=48,N=40,K=64)
Traceback (most recent call last):
  [1 frame in other files]
  File "evokernel_candidate.py", line 4, in <module>
RuntimeError: ANTHROPIC_API_KEY=[redacted]
[evokernel: 3 lines the candidate printed or quoted, left out]
>>> redact_failure(redact_failure(text)) == redact_failure(text)
True
"""

from __future__ import annotations

import re

__all__ = ["redact_failure", "LIMIT", "MESSAGE"]

#: At most this many characters leave, in all.
LIMIT = 2000
#: An exception's message is cut after this many characters.
MESSAGE = 300
_FIRST = 400  # the first line (the judge's reason)

_HEADERS = frozenset(
    {
        "Traceback (most recent call last):",
        "During handling of the above exception, another exception occurred:",
        "The above exception was the direct cause of the following exception:",
    }
)
_FRAME = re.compile(r'^\s*File "([^"]*)", line (\d+)(?:, in (.*))?$')
_OWN_FILE = re.compile(r"(?:^|/)(evokernel_candidate(?:_\d+)?\.py)$")
_EXCEPTION = re.compile(
    r"^(\(raised from\) )?([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure|Unsupported))(?::(.*))?$"
)
_NOTES = (
    re.compile(r"^\[evokernel: output cut after \d+ bytes\]$"),
    re.compile(r"^\[evokernel: \d+ lines? the candidate printed or quoted, left out\]$"),
    re.compile(r"^  \[\d+ frames? in other files\]$"),
)
_SECRET_NAME = re.compile(
    r"(?i)\b([\w.-]*(?:KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE)[\w.-]*)(\s*[=:]\s*)(?!\[redacted\])\S+"
)
_WORD = re.compile(r"[A-Za-z0-9_+/=$-]{16,}")
_FUNC = re.compile(r"^[A-Za-z_<][\w<>.]{0,79}$")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 6] + " [cut]"


def _looks_secret(word: str) -> bool:
    digits = sum(c.isdigit() for c in word)
    letters = sum(c.isalpha() for c in word)
    return len(word) >= 32 or (digits >= 2 and letters >= 2)


def _secret_name(name: str) -> bool:
    """A name whose value is a secret: ANTHROPIC_API_KEY, api_key, db.password, PASSWORD;
    not an exception's type (KeyError: 'x') nor a plain word ("3 tokens: ...")."""
    if _EXCEPTION.match(name):
        return False
    return any(c in name for c in "_.-") or name.isupper() or name.lower() in _SECRET_WORDS


_SECRET_WORDS = frozenset({"password", "passwd", "secret", "token", "apikey", "credentials"})


def _scrub(text: str) -> str:
    def value(m: re.Match[str]) -> str:
        return f"{m.group(1)}{m.group(2)}[redacted]" if _secret_name(m.group(1)) else m.group(0)

    text = _SECRET_NAME.sub(value, text)
    return _WORD.sub(lambda m: "[redacted]" if _looks_secret(m.group(0)) else m.group(0), text)


def redact_failure(text: str) -> str:
    """`text` (a failure's reason, then what the candidate's process printed) as it may be
    stored or shown to a model; see the module's doc. Idempotent."""
    if not text:
        return text
    lines = text.splitlines()
    out = [_cut(_scrub(lines[0]), _FIRST)]
    left_out, elsewhere = 0, 0

    def flush() -> None:
        nonlocal elsewhere
        if elsewhere:
            out.append(f"  [{elsewhere} frame{'s' if elsewhere > 1 else ''} in other files]")
            elsewhere = 0

    for line in lines[1:]:
        stripped = line.rstrip()
        frame = _FRAME.match(stripped)
        if frame is not None:
            own = _OWN_FILE.search(frame.group(1))
            func = (frame.group(3) or "").strip()
            if own is None:
                elsewhere += 1
                continue
            flush()
            where = f'  File "{own.group(1)}", line {frame.group(2)}'
            if _FUNC.match(func) and _scrub(func) == func:
                where += f", in {func}"
            out.append(where)
            continue
        m = _EXCEPTION.match(stripped)
        if stripped in _HEADERS or m is not None or any(n.match(stripped) for n in _NOTES):
            flush()
            if m is not None:
                message = _cut(_scrub(m.group(3).strip()), MESSAGE) if m.group(3) else ""
                stripped = f"{m.group(1) or ''}{m.group(2)}" + (f": {message}" if message else "")
            if stripped.startswith("[evokernel: ") and "left out" in stripped:
                left_out += int(stripped.split()[1])
                continue
            out.append(stripped)
            continue
        if stripped.strip():
            left_out += 1  # a frame's source line, a caret, or anything the candidate printed
    flush()
    if left_out:
        out.append(
            f"[evokernel: {left_out} line{'s' if left_out > 1 else ''} the candidate printed or quoted, left out]"
        )
    return _cut("\n".join(out), LIMIT)
