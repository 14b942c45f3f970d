"""The examples of the READMEs run as printed."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
READMES = [HERE.parent.parent / "README.md", HERE.parent / "README.md"]


def python_example(readme: Path) -> str:
    """The first ```python block of ``readme`` (of its "## Python" section in the
    repository's README)."""
    text = readme.read_text(encoding="utf-8")
    if "\n## Python\n" in text:
        text = text.split("\n## Python\n", 1)[1]
    m = re.search(r"```python\n(.*?)```", text, re.S)
    assert m, f"{readme} has no python example"
    return m.group(1)


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(HERE.parent.parent)))
def test_the_readme_example_runs(readme):
    if not readme.is_file():
        pytest.skip(f"{readme} is not in this checkout")
    code = python_example(readme)
    assert len(code.strip().splitlines()) == 5, "the README promises five lines"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(readme), "exec"), {})
    lines = out.getvalue().splitlines()
    assert sum(line.lstrip().startswith("its =") for line in lines) == 20
    assert re.match(r"fit 0\.\d{4} \[", lines[-1]), lines[-1]
