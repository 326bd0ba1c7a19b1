"""bot/telegram/rendering/render.py: Markdown → Telegram text + entities, split to the size limit."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.telegram.rendering.render import (
    Chunk,
    plain_chunks,
    progress_text,
    render_markdown,
    split_text,
    utf16_len,
)


def utf16_slice(text: str, offset: int, length: int) -> str:
    data = text.encode("utf-16-le")
    return data[2 * offset : 2 * (offset + length)].decode("utf-16-le")


def check_entities(text: str, entities: list[dict[str, Any]]) -> None:
    """Offsets/lengths are UTF-16, inside the text, on character boundaries."""
    total = utf16_len(text)
    for e in entities:
        assert set(e) >= {"type", "offset", "length"}, e
        assert isinstance(e["offset"], int) and isinstance(e["length"], int)
        assert e["offset"] >= 0 and e["length"] > 0, e
        assert e["offset"] + e["length"] <= total, (e, total)
        # slicing on a surrogate boundary would fail to decode
        utf16_slice(text, e["offset"], e["length"])


def check_chunks(chunks: list[Chunk], limit: int) -> None:
    for chunk in chunks:
        assert chunk.text.strip(), "whitespace-only chunk"
        assert utf16_len(chunk.text) <= limit
        check_entities(chunk.text, chunk.entities)


def entity_texts(chunk: Chunk, kind: str) -> list[str]:
    return [
        utf16_slice(chunk.text, e["offset"], e["length"])
        for e in chunk.entities
        if e["type"] == kind
    ]


# --- rendering -----------------------------------------------------------------------


def test_inline_styles_and_links() -> None:
    [chunk] = render_markdown("**bold** and *it* and `code` and [link](https://example.org)")
    check_entities(chunk.text, chunk.entities)
    assert chunk.text == "bold and it and code and link"
    assert entity_texts(chunk, "bold") == ["bold"]
    assert entity_texts(chunk, "italic") == ["it"]
    assert entity_texts(chunk, "code") == ["code"]
    [link] = [e for e in chunk.entities if e["type"] == "text_link"]
    assert link["url"] == "https://example.org"
    assert utf16_slice(chunk.text, link["offset"], link["length"]) == "link"


def test_lists_headings_and_code_block() -> None:
    md = "# Title\n\n- one\n- two\n\n1. first\n2. second\n\n```python\nprint('hi')\n```\n"
    [chunk] = render_markdown(md)
    check_entities(chunk.text, chunk.entities)
    assert "Title" in entity_texts(chunk, "bold")
    assert "⦁ one\n⦁ two" in chunk.text
    assert "1. first\n2. second" in chunk.text
    [pre] = [e for e in chunk.entities if e["type"] == "pre"]
    assert pre["language"] == "python"
    assert utf16_slice(chunk.text, pre["offset"], pre["length"]) == "print('hi')"
    assert "#" not in chunk.text and "```" not in chunk.text


def test_entities_sorted_by_offset() -> None:
    [chunk] = render_markdown("x **bold *it* b** y")
    offsets = [e["offset"] for e in chunk.entities]
    assert offsets == sorted(offsets)
    check_entities(chunk.text, chunk.entities)


def test_astral_characters_count_two_units() -> None:
    [chunk] = render_markdown("😀😀 **b😀ld** `c😀de` end")
    check_entities(chunk.text, chunk.entities)
    [bold] = [e for e in chunk.entities if e["type"] == "bold"]
    assert bold["offset"] == 5  # two emoji (4 units) + space
    assert bold["length"] == 5  # b + emoji (2) + l + d
    assert entity_texts(chunk, "bold") == ["b😀ld"]
    assert entity_texts(chunk, "code") == ["c😀de"]


def test_raw_html_is_shown_not_dropped() -> None:
    # telegramify-markdown alone drops inline HTML and whole HTML blocks
    [chunk] = render_markdown("Use List<T> or <placeholder> here.\n\n<details>\nsecret\n</details>")
    assert "List<T>" in chunk.text
    assert "<placeholder>" in chunk.text
    assert "<details>" in chunk.text and "secret" in chunk.text
    check_entities(chunk.text, chunk.entities)


def test_spoiler_still_works() -> None:
    [chunk] = render_markdown("a ||hidden|| b")
    assert entity_texts(chunk, "spoiler") == ["hidden"]


def test_unsafe_or_relative_links_become_plain_text() -> None:
    [chunk] = render_markdown("[a](javascript:alert(1)) [b](docs/x.md) [c](tg://user?id=1)")
    urls = [e["url"] for e in chunk.entities if e["type"] == "text_link"]
    assert urls == ["tg://user?id=1"]
    assert chunk.text == "a b c"


def test_a_mail_or_phone_link_shows_its_address_and_later_entities_stay_in_place() -> None:
    """A mailto: link (Telegram carries no such text_link) showed only its label: the
    address was lost (found by review)."""
    [chunk] = render_markdown(
        "Write to *[support](mailto:help@example.com?subject=x)* or "
        "[call](tel:+4712345678) 😀 **now** [site](https://x.org)"
    )
    assert chunk.text == ("Write to support (help@example.com) or call (+4712345678) 😀 now site")
    assert entity_texts(chunk, "italic") == ["support"]
    assert entity_texts(chunk, "bold") == ["now"]
    assert entity_texts(chunk, "text_link") == ["site"]


def test_an_open_task_does_not_look_done() -> None:
    """The library's open task is U+2611, a *ticked* box (found by review)."""
    [chunk] = render_markdown("- [ ] pay the invoice\n- [x] send the report")
    first, second = chunk.text.splitlines()
    assert first.startswith("☐") and "\u2611" not in first
    assert second.startswith("✅")


def test_empty_and_whitespace_input() -> None:
    assert render_markdown("") == []
    assert render_markdown("  \n\n\t ") == []
    assert plain_chunks("") == []
    assert plain_chunks(" \n ") == []


# --- splitting -----------------------------------------------------------------------


def test_long_reply_splits_on_paragraph_boundaries() -> None:
    paragraphs = [f"Paragraph {i} " + "word " * 80 for i in range(25)]
    md = "\n\n".join(p.strip() for p in paragraphs)
    assert len(md) > 10_000
    chunks = render_markdown(md)
    check_chunks(chunks, 4096)
    assert len(chunks) == 3
    for chunk in chunks:
        assert chunk.text.startswith("Paragraph ")
        assert chunk.text.endswith("word")
    assert "\n\n".join(c.text for c in chunks) == md


def test_line_boundary_when_no_paragraph_fits() -> None:
    text = "\n".join(f"line {i:03}" for i in range(100))
    chunks = plain_chunks(text, limit=100)
    check_chunks(chunks, 100)
    assert all(c.text.startswith("line ") and len(c.text.split("\n")[-1]) == 8 for c in chunks)
    assert "\n".join(c.text for c in chunks) == text


def test_hard_cut_prefers_spaces_then_cuts() -> None:
    chunks = plain_chunks("abc " * 30, limit=25)
    check_chunks(chunks, 25)
    assert all(set(c.text.split(" ")) == {"abc"} for c in chunks)
    chunks = plain_chunks("x" * 100, limit=30)
    assert [len(c.text) for c in chunks] == [30, 30, 30, 10]


def test_hard_cut_never_splits_an_astral_character() -> None:
    chunks = plain_chunks("😀" * 10, limit=5)
    check_chunks(chunks, 5)
    assert "".join(c.text for c in chunks) == "😀" * 10
    assert [c.text for c in chunks] == ["😀😀"] * 5


def test_fitting_code_block_moves_whole_to_next_chunk() -> None:
    code = "\n".join(f"x{i} = {i}" for i in range(10))
    md = "intro " * 10 + "\n```py\n" + code + "\n```\nafter"
    chunks = render_markdown(md, limit=120)
    check_chunks(chunks, 120)
    pres = [(c, e) for c in chunks for e in c.entities if e["type"] == "pre"]
    assert len(pres) == 1
    chunk, pre = pres[0]
    assert utf16_slice(chunk.text, pre["offset"], pre["length"]) == code
    assert pre["language"] == "py"


def test_long_code_block_is_split_with_pre_in_every_chunk() -> None:
    code = "\n".join(f"value_{i} = compute({i})  # 😀" for i in range(400))
    md = "Here:\n\n```python\n" + code + "\n```\n\nDone."
    chunks = render_markdown(md)
    check_chunks(chunks, 4096)
    assert len(chunks) >= 4
    code_parts = []
    for chunk in chunks:
        pres = [e for e in chunk.entities if e["type"] == "pre"]
        if chunk.text in ("Here:", "Done."):
            continue
        assert len(pres) == 1
        assert pres[0]["language"] == "python"
        code_parts.append(utf16_slice(chunk.text, pres[0]["offset"], pres[0]["length"]))
    assert "\n".join(code_parts) == code
    # cut on line boundaries inside the block
    assert all(p.startswith("value_") for p in code_parts)


def test_entity_never_crosses_a_chunk() -> None:
    # bold spans sit across where a plain hard cut would fall
    md = " ".join(f"**bold{i} words here**" for i in range(200))
    chunks = render_markdown(md, limit=97)
    check_chunks(chunks, 97)
    for chunk in chunks:
        for text in entity_texts(chunk, "bold"):
            assert text.startswith("bold") and text.endswith("words here")


def test_whitespace_chunks_dropped_and_edges_trimmed() -> None:
    text = "a" * 10 + "\n" + " " * 30 + "\n\n\n" + "b" * 10 + "\n\n"
    chunks = plain_chunks(text, limit=12)
    assert [c.text for c in chunks] == ["a" * 10, "b" * 10]


def test_plain_fallback_keeps_markdown_literal() -> None:
    [chunk] = plain_chunks("**not bold** <b>")
    assert chunk == Chunk("**not bold** <b>", [])


def test_split_text_drops_bad_entities() -> None:
    text = "😀 ok"
    [chunk] = split_text(
        text,
        [{"type": "bold", "offset": 1, "length": 2}, {"type": "bold", "offset": 3, "length": 2}],
    )
    assert chunk.entities == [{"type": "bold", "offset": 3, "length": 2}]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "word",
                "😀",
                "**bold text**",
                "`code`",
                "\n",
                "\n\n",
                " ",
                "é",
                "[l](https://a.b)",
                "\n```js\nlet a = 1;\nlet b = 2;\n```\n",
                "- item\n",
            ]
        ),
        max_size=120,
    ),
    st.integers(min_value=8, max_value=200),
)
def test_split_invariants(pieces: list[str], limit: int) -> None:
    md = "".join(pieces)
    chunks = render_markdown(md, limit=limit)
    check_chunks(chunks, limit)
    # no text lost apart from whitespace at the cuts
    whole = render_markdown(md, limit=100_000)
    squash = lambda s: "".join(s.split())  # noqa: E731
    assert squash("".join(c.text for c in chunks)) == squash("".join(c.text for c in whole))


# --- progress ------------------------------------------------------------------------


def test_progress_keeps_everything_that_fits() -> None:
    lines = ["⚙ read_file notes.md ✓", "⚙ execute_cmd ls ✓", "⚙ write_file a.py"]
    assert progress_text(lines) == "\n".join(lines)
    assert progress_text([]) == ""


def test_progress_keeps_the_last_lines() -> None:
    lines = [f"⚙ step {i} ✓" for i in range(1000)]
    text = progress_text(lines, limit=200)
    assert utf16_len(text) <= 200
    assert text.startswith("…\n")
    assert text.endswith("⚙ step 999 ✓")
    kept = text.split("\n")[1:]
    assert kept == lines[-len(kept) :]


def test_progress_cuts_a_single_huge_line() -> None:
    text = progress_text(["short", "😀" * 500], limit=101)
    assert utf16_len(text) <= 101
    assert text.endswith("…") and text.startswith("😀")


def test_a_link_in_a_table_keeps_its_address() -> None:
    """A table is drawn as preformatted text: "[guide](https://…)" in a cell showed
    "guide" alone (found by review on 2026-12-07); a code span in a cell stays as it is."""
    table = (
        "| Step | Link |\n|---|---|\n"
        "| Install | [guide](https://example.com/guide) and `[x](y)` |\n"
        "| Raw | <https://b.example> |\n"
    )
    [chunk] = render_markdown(f"See [a](https://a.example).\n\n{table}")
    assert "guide (https://example.com/guide) and [x](y)" in chunk.text
    assert "| https://b.example" in chunk.text
    assert chunk.text.startswith("See a.")  # a link outside a table stays a link
    assert chunk.entities[0] == {
        "type": "text_link", "offset": 4, "length": 1, "url": "https://a.example"
    }  # fmt: skip


def test_a_table_links_label_keeps_its_escapes_and_a_reference_link_its_address() -> None:
    """The label as written: an escaped "|" made a new cell and cut the address off; a
    reference-style link in a cell lost its address (found by review on 2026-12-07)."""
    [escaped] = render_markdown("| h |\n|---|\n| [a\\|b](https://x.example) |")
    assert "a|b (https://x.example)" in escaped.text
    [referenced] = render_markdown("| h |\n|---|\n| [a][r] |\n\n[r]: https://r.example")
    assert "a (https://r.example)" in referenced.text
