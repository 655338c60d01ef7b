"""Every kind of damaged file parses to a notebook or is refused with ``NotebookInvalid`` naming
the problem: no other exception, whatever the damage (the generator is tests/security/damaged.py)."""

from __future__ import annotations

import pytest

from nbrelay.errors import NotebookInvalid
from nbrelay.notebook import validate
from nbrelay.notebook.model import parse, serialize
from tests.security.damaged import damaged

CASES = list(damaged())


@pytest.mark.parametrize(("name", "raw"), CASES, ids=[n for n, _ in CASES])
def test_a_damaged_file_parses_or_is_refused_with_a_reason(name: str, raw: bytes) -> None:
    refusal = ""
    try:
        nb = parse(raw, name="d.ipynb")
    except NotebookInvalid as exc:
        refusal = str(exc)
    if refusal:
        assert refusal.startswith("d.ipynb"), refusal
        return
    # What parses can be validated, rendered by the readers and written back.
    validate.problems(nb)
    serialize(nb)


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("nbformat_minor is string", "nbformat_minor is 'oops'"),
        ("cells/1/outputs/0/text is int", "cell 1 (id 'c1'), output 0's text is a number"),
        ("cells/0/attachments is list", "cell 0 (id 'm0')'s attachments are a list"),
        ("cells/1/execution_count is float", "execution_count is 1.5, not a count"),
        ("metadata nested 100 deep", "nests values over 64 levels deep"),
        ("enormous integer", "cannot be read"),
        ("nbformat 4.0", "nbformat 4.0"),
    ],
)
def test_the_refusal_names_the_field(name: str, said: str) -> None:
    raw = dict(CASES)[name]
    with pytest.raises(NotebookInvalid) as caught:
        parse(raw, name="d.ipynb")
    assert said in str(caught.value)
