"""`remove_tree`: a candidate's folder goes, whatever it made there, and the judge never
raises while removing it (evokernel.judge.cleanup)."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

import pytest

from evokernel.judge import cleanup
from evokernel.judge.cleanup import QUARANTINE, remove_tree


def _chain(top: Path, depth: int, name: str = "d" * 50) -> int:
    """A chain of `depth` folders under `top` (names of 50 characters: its paths pass
    PATH_MAX); returns a descriptor on the deepest (the caller closes it)."""
    fd = os.open(top, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        inner = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    return fd


def test_deep_chain_links_and_no_permissions(tmp_path: Path) -> None:
    outside = tmp_path / "judge.txt"
    outside.write_text("the judge's")
    (tmp_path / "judge-dir").mkdir()
    (tmp_path / "judge-dir" / "keep").write_text("x")
    top = tmp_path / "work"
    top.mkdir()
    fd = _chain(top, 5000)  # 255 KB of path: well past PATH_MAX, and past the recursion limit
    try:
        os.symlink(str(outside), "to-file", dir_fd=fd)
        os.symlink(str(tmp_path / "judge-dir"), "to-dir", dir_fd=fd)
        os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o000, dir_fd=fd))
        os.chmod(fd, 0o000)
    finally:
        os.close(fd)
    for i in range(50):  # wide too
        (top / f"w{i}").mkdir()
        (top / f"w{i}" / "x").write_text("y")
    (top / "w0").chmod(0o000)
    os.symlink(str(tmp_path / "judge-dir"), top / "link-to-judge")
    assert remove_tree(top) is None
    assert not top.exists()
    assert outside.read_text() == "the judge's" and (tmp_path / "judge-dir" / "keep").exists()


def test_a_file_a_link_or_nothing(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    assert remove_tree(f) is None and not f.exists()
    assert remove_tree(link) is None and not link.is_symlink() and target.is_dir()
    assert remove_tree(tmp_path / "missing") is None
    assert remove_tree(tmp_path / "missing" / "deeper") is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_no_permissions_as_an_ordinary_user() -> None:
    """Folders the candidate left without permissions go, removed by their owner (not root:
    root's permission checks pass anyway)."""
    tmp_path = Path(tempfile.mkdtemp())  # (pytest's own is out of another user's reach)
    os.chmod(tmp_path, 0o777)
    pid = os.fork()
    if pid == 0:  # the child: nobody, making and removing its own tree
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            top = tmp_path / "work"
            top.mkdir()
            fd = _chain(top, 200, "d")
            os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o000, dir_fd=fd))
            os.chmod(fd, 0o000)
            os.close(fd)
            (top / "d").chmod(0o500)  # no write in the first level
            (top / "ro").mkdir(mode=0o000)
            code = 0 if remove_tree(top) is None and not top.exists() else 2
        except BaseException as exc:
            print(exc, file=sys.stderr)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    remove_tree(tmp_path)
    assert os.waitstatus_to_exitcode(status) == 0


def test_unremovable_is_quarantined_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    top = tmp_path / "evokernel-candidate-x"
    (top / "a" / "b").mkdir(parents=True)
    real = os.rmdir

    def refuse(name: str, *, dir_fd: int | None = None) -> None:
        if name == "b":
            raise PermissionError(1, "Operation not permitted", name)
        real(name, dir_fd=dir_fd)

    monkeypatch.setattr(cleanup.os, "rmdir", refuse)
    with caplog.at_level(logging.WARNING, logger="evokernel.judge"):
        where = remove_tree(top)
    assert where is not None and Path(where).parent == tmp_path / QUARANTINE
    assert not top.exists() and (Path(where) / "a" / "b").is_dir()
    assert any("moved to" in r.getMessage() and str(top) in r.getMessage() for r in caplog.records)


def test_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "no" / "such"))  # nor can it be quarantined

    def broken(parent: int, name: str) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(cleanup, "_remove", broken)
    (tmp_path / "nowhere").mkdir(parents=True)
    (tmp_path / "no").write_text("a file where the quarantine's parent should be")
    top = tmp_path / "work"
    top.mkdir()
    assert remove_tree(top) == str(top) and top.is_dir()


@pytest.mark.slow
def test_a_candidates_deep_chain_goes_with_its_sandbox() -> None:
    """Through the judge: a candidate whose folder is the host's (one the user's template
    rendered: its Triton helpers are read back) makes the corpus's 20,000-deep chain there;
    the judge's verdict stands and the folder goes with the sandbox."""
    from evokernel.judge.gate import GateOptions, Judge
    from evokernel.judge.problem import Problem
    from evokernel.judge.sandbox import SandboxOptions, wait_for_cleanup

    corpus = Path(__file__).resolve().parent / "corpus"
    options = GateOptions(
        seeds=1, heldout_seeds=1, recheck_seeds=1, time=False, sandbox=SandboxOptions(start_timeout_s=60)
    )
    judge = Judge(Problem.load(corpus / "problems" / "matmul_small.py"), "cpu", options)
    sandbox = judge.sandbox((corpus / "cheats" / "deep_folder_chain.py").read_text(), trusted=True)
    try:
        verdict = judge.judge(sandbox)
        assert os.path.isdir(os.path.join(sandbox.work_dir, "d", "d", "d")), "the chain is not in the host's folder"
    finally:
        sandbox.close()
    assert "made a folder chain 20000 deep" in verdict.reason, verdict.reason
    assert wait_for_cleanup(60)
    assert not os.path.exists(sandbox.work_dir)
    judge.close()
