"""An `--llm` search whose model answers with nothing but attacks on the judge (issue 50).

The real Anthropic SDK, its HTTP transport answering with the recorded tool-use response
(tests/recorded/anthropic/success_tool_use.json) whose kernel is swapped for an attack: a
20,000-deep chain of folders, a reader of a canary file outside its folder (printed, raised
with, dressed as a traceback), a 1 MB exception message, writes outside its own folder. The
search, on the CPU through the real sandbox, must end as usual with every attack rejected;
the canary's token must be neither in the store nor in any request the model received; the
candidates leave nothing in the temporary folder.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest

anthropic = pytest.importorskip("anthropic")
try:  # the HTTP library the SDK is built on: httpx2 in recent releases, httpx before
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the installed SDK
    import httpx

from evokernel import Budget, Search  # noqa: E402
from evokernel.core import redact  # noqa: E402
from evokernel.engine.search import SearchOptions  # noqa: E402
from evokernel.evaluators import KernelEvaluator  # noqa: E402
from evokernel.judge.cleanup import QUARANTINE, remove_tree  # noqa: E402
from evokernel.judge.gate import GateOptions  # noqa: E402
from evokernel.judge.sandbox import SandboxOptions, wait_for_cleanup  # noqa: E402
from evokernel.mutators.llm import AnthropicProvider, LLMRewrite  # noqa: E402
from evokernel.search_spaces import matmul_space  # noqa: E402
from evokernel.search_spaces.matmul.template import candidate_source  # noqa: E402
from tests.test_judge_verdicts import CANARY_READER, canary_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ANSWER = json.loads((ROOT / "tests" / "recorded" / "anthropic" / "success_tool_use.json").read_text())
PROBLEM = ROOT / "tests" / "corpus" / "problems" / "matmul_small.py"
QUICK = GateOptions(
    seeds=1,
    heldout_seeds=1,
    recheck_seeds=1,
    race=0,
    timing={"max_reps": 5, "min_reps": 3, "max_s": 0.5},
    sandbox=SandboxOptions(start_timeout_s=60, call_timeout_s=30, time_timeout_s=60),
)

_HEAD = 'CONFIG = {"BM": 32, "BN": 32, "BK": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 2}\n'

#: name -> (source, what its rejection says)
ATTACKS: dict[str, tuple[str, str]] = {
    "deep_chain": (
        _HEAD
        + (ROOT / "tests" / "corpus" / "cheats" / "deep_folder_chain.py")
        .read_text()
        .split("import os", 1)[1]
        .join(["import os", ""]),
        "raised: RuntimeError: made a folder chain 20000 deep",
    ),
    "canary": (  # test_judge_verdicts' reader, its CONFIG line ours
        _HEAD + "\n" + CANARY_READER.split("\n\n", 1)[1].replace("{path!r}", "{canary!r}"),
        "raised: RuntimeError: read: ",
    ),
    "flood_message": (
        _HEAD + '\n\ndef kernel(a, b):\n    raise RuntimeError("leak " * 200_000)\n',
        "raised: RuntimeError: leak leak",
    ),
    "write_outside": (
        _HEAD
        + """
import os

import torch

WROTE = []
for where in {targets!r}:
    try:
        with open(where, "w") as f:
            f.write("escaped")
        WROTE.append(where)
    except OSError:
        pass


def kernel(a, b):
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
""",
        "wrong result",
    ),
}

_N = itertools.count()


class Attacker:
    """The model: every request is answered with the next attack (a comment numbers each
    answer, so none repeats an earlier one); keeps the requests."""

    def __init__(self, sources: list[str]) -> None:
        self.sources = itertools.cycle(sources)
        self.requests: list[bytes] = []

    def __call__(self, request: Any) -> Any:
        self.requests.append(request.content)
        body = json.loads(json.dumps(ANSWER))
        for block in body["content"]:
            if block.get("type") == "tool_use":
                block["input"]["source"] = next(self.sources) + f"\n# answer {next(_N)}\n"
        return httpx.Response(200, json=body, headers={"request-id": "req_attack"})


@pytest.mark.slow
def test_a_search_whose_model_answers_only_with_attacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evokernel.store import SQLiteStore

    canary, token = canary_file()
    tag = secrets.token_hex(4)  # (not the canary's token: the sources are stored, and sent)
    targets = [
        os.path.join(sys.prefix, f"evokernel-escape-{tag}"),  # the interpreter's prefix (shown, read-only)
        str(ROOT / f"evokernel-escape-{tag}"),  # the checkout beside the judge
        f"/var/tmp/evokernel-escape-{tag}",
        os.path.join(os.path.expanduser("~"), f"evokernel-escape-{tag}"),
    ]
    sources = {
        name: (src.replace("{canary!r}", repr(str(canary))).replace("{targets!r}", repr(targets)), why)
        for name, (src, why) in ATTACKS.items()
    }
    tmp = tmp_path / "tmp"  # the judge's temporary folder: the candidates' folders are made there
    tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    seen: list[str] = []  # what reached the filter on the way to the store: the candidate did read it

    def spy(text: str) -> str:
        seen.append(text)
        return redact.redact_failure(text)

    monkeypatch.setattr("evokernel.store._sql.redact_failure", spy)
    attacker = Attacker([src for src, _ in sources.values()])
    client = anthropic.Anthropic(
        api_key="sk-test", max_retries=0, http_client=httpx.Client(transport=httpx.MockTransport(attacker))
    )
    rewrite = LLMRewrite(
        PROBLEM,
        provider=AnthropicProvider("claude-sonnet-5", client=client),
        render=lambda g: candidate_source(g.params),
    )
    store = SQLiteStore(str(tmp_path / "search.db"))
    ev = KernelEvaluator(PROBLEM, lambda g: candidate_source(g.params), device="cpu", options=QUICK, workers=1)
    try:
        with ev:
            report = Search(
                matmul_space(),
                ev,
                [rewrite],
                store=store,
                options=SearchOptions(population=1, remeasure=0, report_elites=1),
            ).run(Budget(evaluations=1 + len(sources)), seed=0)
        history = store.history(report.run_id)
        store.close()
    finally:
        canary.unlink()
        escaped = [t for t in targets if os.path.exists(t)]
        for t in escaped:
            os.unlink(t)

    # the search ended as usual, every attack judged and rejected with its own reason
    assert report.evaluations == 1 + len(sources), report
    mine = [e for e in history if e.genome.lineage.operator == "llm-rewrite"]
    assert len(mine) == len(sources), [e.result.error[:200] for e in mine]
    for (name, (src, why)), e in zip(sources.items(), mine):
        assert e.genome.source.startswith(src.rstrip("\n")[:200]), name
        assert not e.result.is_ok, f"{name} accepted"
        assert e.result.error.startswith(why), (name, e.result.error[:300])
        assert len(e.result.error) <= redact.LIMIT, name
    assert not escaped, f"written outside the candidate's folder: {escaped}"

    # the canary was read, and went nowhere
    assert any(token in text for text in seen), "no candidate read the canary: the test proves nothing"
    for f in tmp_path.iterdir():
        if f.is_file():
            assert token.encode() not in f.read_bytes(), f"the canary's token is in {f.name}"
    assert len(attacker.requests) >= len(sources)
    for i, body in enumerate(attacker.requests):
        assert token.encode() not in body, f"the canary's token was sent to the model (request {i})"
    assert any(b"It was rejected with" in body for body in attacker.requests), "no repair prompt was sent"

    # nothing of the candidates' is left in the temporary folder
    assert wait_for_cleanup(60)
    left = sorted(p.name for p in tmp.iterdir() if p.name.startswith(("evokernel-candidate-", QUARANTINE)))
    try:
        assert left == [], left
    finally:
        for name in left:
            remove_tree(tmp / name)
