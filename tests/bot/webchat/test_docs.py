"""docs/webchat.md documents every frame with every field the models have."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.webchat.protocol import CLIENT_FRAMES, SERVER_FRAMES

DOC = Path(__file__).parents[3] / "docs" / "webchat.md"


def _sections() -> dict[str, str]:
    text = DOC.read_text()
    parts = re.split(r"^#### `([a-z_]+)`$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.parametrize("model", [*CLIENT_FRAMES, *SERVER_FRAMES], ids=lambda m: m.__name__)
def test_every_frame_and_field_is_documented(model):
    kind = model.model_json_schema()["properties"]["type"]
    name = kind.get("const") or kind.get("default")
    section = _sections().get(name)
    assert section is not None, f"docs/webchat.md has no section for {name!r}"
    for field in model.model_fields:
        assert f"| `{field}` |" in section, f"{name}: field {field!r} undocumented"
