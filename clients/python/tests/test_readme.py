"""Every ```python block of the README runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_plugin import _plugin_args

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester) -> None:
    code = BLOCKS[index]
    if re.search(r"^def test_", code, flags=re.M):
        pytest.importorskip("boto3")
        pytester.makepyfile(test_readme_sample=code)
        pytester.runpytest(*_plugin_args()).assert_outcomes(passed=len(re.findall(r"^def test_", code, flags=re.M)))
        return
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"README.md[python block {index}]", "exec"), {"__name__": "__readme__"})
