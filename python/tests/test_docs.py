"""The complete example of docs/python.md runs and passes its own check."""

import re

from conftest import REPO


def test_the_python_doc_example_runs(capsys):
    text = (REPO / "docs" / "python.md").read_text()
    section = text.split("## A complete example", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "docs/python.md", "exec"), {"__name__": "doc_example"})
    assert "max |xthunk - numpy|" in capsys.readouterr().out
