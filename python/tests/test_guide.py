"""Every ```python block of the user guide (docs/guide/*.md) runs, against the installed package."""
import glob
import os
import re

import pytest

from conftest import REPO

BLOCKS = []
for page in sorted(glob.glob(os.path.join(REPO, "docs", "guide", "*.md"))):
    text = open(page).read()
    for i, m in enumerate(re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M)):
        BLOCKS.append(pytest.param(m.group(1), id=f"{os.path.basename(page)}:{i + 1}"))


def test_the_guide_has_python():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("code", BLOCKS)
def test_guide_block_runs(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "<guide>", "exec"), {"__name__": "__guide__"})
