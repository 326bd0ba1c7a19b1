"""Output bounding: what the model reads when a tool says too much."""

from __future__ import annotations

from engine.tools.output import OutputCollector, decode_head, decode_tail, truncate_output


def test_short_text_is_returned_unchanged() -> None:
    assert truncate_output("hello", 5) == "hello"


def test_long_text_keeps_head_and_tail_with_a_note() -> None:
    text = "H" * 100 + "m" * 10_000 + "T" * 100

    out = truncate_output(text, 200)

    assert out.startswith("H" * 100 + "\n")
    assert out.endswith("\n" + "T" * 100)
    assert "m" not in out
    assert (
        "[... output truncated: 10200 chars total, showing first 100 and last 100 chars ...]" in out
    )


def test_a_10mb_text_is_cut_to_the_limit_plus_a_short_note() -> None:
    out = truncate_output("a" * 10_485_760, 1000)

    assert "10485760 chars total" in out
    assert len(out) < 1000 + 120


def test_collector_keeps_small_streams_whole() -> None:
    collector = OutputCollector(100)
    for chunk in (b"one ", b"two ", b"three"):
        collector.feed(chunk)

    assert not collector.truncated
    assert collector.text() == "one two three"
    assert collector.total_bytes == 13


def test_collector_bounds_a_10mb_stream_and_still_knows_its_size() -> None:
    collector = OutputCollector(1000)
    chunk = b"x" * 65536
    for _ in range(160):  # 10 MiB in pipe-sized chunks
        collector.feed(chunk)
    collector.feed(b"THE END")

    assert collector.truncated
    assert collector.total_bytes == 160 * 65536 + 7
    assert len(collector._head) + len(collector._tail) == 1000  # memory stays bounded
    text = collector.text()
    assert text.endswith("THE END")
    assert f"[... output truncated: {160 * 65536 + 7} bytes total" in text


def test_collector_cut_inside_a_multibyte_character_shows_no_garbage() -> None:
    collector = OutputCollector(7)  # head 3 bytes, tail 4 bytes
    collector.feed("ééééééééé".encode())  # 2 bytes each: both cuts split a character

    text = collector.text()

    assert "\ufffd" not in text
    assert text.startswith("é\n[...")
    assert text.endswith("\néé")


def test_decoders_drop_partial_characters_at_the_cut() -> None:
    data = "€uro€".encode()  # € is 3 bytes
    assert decode_head(data[:-1]) == "€uro"
    assert decode_tail(data[1:]) == "uro€"
