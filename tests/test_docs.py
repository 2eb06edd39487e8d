"""Documents generated from code stay in step with it."""

from pathlib import Path

from rft.config.reference import reference_markdown

REPO = Path(__file__).resolve().parents[1]


def test_config_reference_is_current():
    text = (REPO / "docs" / "config.md").read_text()
    assert text == reference_markdown(), "docs/config.md is stale: run `rft config reference > docs/config.md`"


def test_config_reference_documents_every_key():
    from rft.config.schema import RFTConfig
    from rft.config.sft_schema import SFTConfig
    from rft.config.validate import walk

    text = reference_markdown()
    for schema in (RFTConfig, SFTConfig):
        for key, field, _ in walk(schema()):
            assert f"| `{key}` |" in text
            assert field.metadata.get("help"), f"{key} has no help text"
