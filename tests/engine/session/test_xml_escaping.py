"""The scratchpad's XML escaping is xml.sax.saxutils' byte for byte: a session's cached
prompt prefix does not change because the module stopped importing xml.sax."""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from hypothesis import given
from hypothesis import strategies as st

from engine.session.context.messages import render_scratchpad, xml_attribute, xml_text

texts = st.text(alphabet=st.sampled_from(list("ab &<>\"'\n\r\té😀")), max_size=16)


@given(texts)
def test_text_is_escaped_as_saxutils_escapes_it(value: str) -> None:
    assert xml_text(value) == escape(value)


@given(texts)
def test_an_attribute_is_quoted_as_saxutils_quotes_it(value: str) -> None:
    assert xml_attribute(value) == quoteattr(value)


def test_a_note_with_both_quotes_and_markup() -> None:
    rendered = render_scratchpad({'it\'s "x"': "a < b & c"})
    assert '<note key="it\'s &quot;x&quot;">a &lt; b &amp; c</note>' in rendered
