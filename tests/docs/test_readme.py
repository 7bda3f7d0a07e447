"""The README's Python examples run and print what they claim."""

import re

import numpy as np

from helpers import REPO

README = REPO / "README.md"


def blocks() -> list[str]:
    text = README.read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def claims(code: str) -> list[tuple[str, str]]:
    """`(expression, claimed value)` for lines `expr    # value...` whose comment starts with a literal."""
    out = []
    for line in code.splitlines():
        m = re.match(r"^(\S.*?)\s+# (\(.*?\)|\{.*?\}|[-\d.]+)(?::|,|\s|$)", line)
        if m and "=" not in m.group(1).split("(")[0] and not line.startswith(("@", "for ", "def ")):
            out.append((m.group(1), m.group(2)))
    return out


def test_readme_has_examples():
    assert len(blocks()) >= 2


def test_readme_examples_run_and_claims_hold(monkeypatch, tmp_path):
    (tmp_path / "examples").symlink_to(REPO / "examples")  # the examples name files relative to the repository
    monkeypatch.chdir(tmp_path)  # and the files they write go here, not into the checkout
    for code in blocks():
        env: dict = {}
        exec(compile(code, str(README), "exec"), env)
        for expr, claim in claims(code):
            if claim.startswith("(1.0 +") or expr.startswith("expr"):
                continue
            got = eval(expr, env)
            want = eval(claim)
            if isinstance(want, dict):
                assert {k: float(v) for k, v in got.items()} == want, (expr, got)
            else:
                np.testing.assert_allclose(
                    np.asarray(got, dtype=float), np.asarray(want, dtype=float), rtol=1e-4, err_msg=expr
                )


def test_readme_repr_claim():
    from symnet import Identity, Weight

    x = Identity()
    assert repr((1.0 + x) * Weight(2.0, name="w")) == "(1.0 + x) * Weight(2.0, name='w')"
