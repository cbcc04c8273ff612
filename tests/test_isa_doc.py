"""The committed ISA reference equals the one generated from the table."""
from __future__ import annotations

from pathlib import Path

from isa.doc import generate_markdown
from isa.spec import SPEC

DOC = Path(__file__).resolve().parents[1] / "docs" / "isa.md"


def test_committed_reference_matches_the_table():
    assert DOC.read_text() == generate_markdown(), (
        "docs/isa.md is stale: run `archsim isa doc -o docs/isa.md`")


def test_reference_documents_every_instruction_and_field():
    text = generate_markdown()
    for s in SPEC:
        assert f"### {s.mnemonic}" in text
        for f in s.fields:
            assert f"| `{f.name}` |" in text
