"""The distribution has a name of its own: "evokernel" on PyPI is another project (issue 51)."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from evokernel.core.plugins import DISTRIBUTION

ROOT = Path(__file__).resolve().parents[1]


def test_the_distribution_is_not_named_evokernel_and_is_looked_up_by_its_name():
    project = (ROOT / "pyproject.toml").read_text().split("[project]\n", 1)[1]
    name = re.search(r'^name = "([^"]+)"$', project, re.M)
    assert name is not None and name.group(1) != "evokernel"
    assert name.group(1) == DISTRIBUTION  # what importlib.metadata is asked for (--version, the recorded env)
    # installed under that name (pip install -e .), with the command and the registry's entry points
    eps = metadata.distribution(DISTRIBUTION).entry_points
    assert any(ep.group == "console_scripts" and ep.name == "evokernel" for ep in eps)
    assert any(ep.group == "evokernel.mutators" for ep in eps)


def test_readme_states_both_names_beside_the_install_instructions():
    readme = (ROOT / "README.md").read_text()
    quick_start = " ".join(readme.split("## Quick start", 1)[1].split("\n## ", 1)[0].split())
    assert f"The distribution is named `{DISTRIBUTION}`" in quick_start
    assert "the import name and the command stay `evokernel`" in quick_start
    assert "`evokernel` on PyPI is another project" in quick_start
    assert not re.search(r"pip install '?evokernel\[", readme)  # an extra through the other project's name
