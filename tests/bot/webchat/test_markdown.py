"""Model text rendered on the server is safe to insert: no tag or attribute comes from it."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.webchat.markdown import render_markdown

#: Every tag the writer emits; anything else in the output came from the input.
_TAGS = re.compile(r"<(/?)([a-zA-Z0-9]+)([^>]*)>")
_ALLOWED = {
    "p", "em", "strong", "del", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6",
    "blockquote", "pre", "code", "ol", "ul", "table", "thead", "th", "td", "a",
    "br", "hr", "input",
}  # fmt: skip
_ATTRIBUTES = re.compile(
    r'^( (href="(https?://|mailto:)[^"]*"|rel="noopener noreferrer nofollow"'
    r'|target="_blank"|class="language-[A-Za-z0-9_+-]+"|start="\d+"'
    r'|type="checkbox"|disabled|checked))*$'
)


def assert_safe(rendered: str) -> None:
    for closing, tag, attributes in _TAGS.findall(rendered):
        assert tag in _ALLOWED, (tag, rendered)
        assert closing == "" or attributes == "", rendered
        assert _ATTRIBUTES.match(attributes), (attributes, rendered)


@pytest.mark.parametrize(
    "hostile",
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "[click](javascript:alert(1))",
        "[click](JAVASCRIPT:alert(1))",
        "[click](data:text/html,<script>alert(1)</script>)",
        '![x](https://e.example/a.png "t" onerror=alert(1))',
        "<a href='javascript:1'>x</a>",
        '```"><script>alert(1)</script>\ncode\n```',
        "<div>\n\n*md inside html*\n\n</div>",
        "`<b>`",
        '[x](https://ok.example/"onmouseover="alert(1))',
        "<svg/onload=alert(1)>",
        "&lt;script&gt;",
    ],
)
def test_hostile_markdown_is_text(hostile: str):
    rendered = render_markdown(hostile)
    assert_safe(rendered)
    assert "<script" not in rendered and "<img" not in rendered and "<svg" not in rendered
    assert 'href="javascript' not in rendered.lower() and 'href="data' not in rendered.lower()


def test_markdown_renders():
    rendered = render_markdown(
        "# Title\n\n**bold** and `code`\n\n```python\nx = 1 < 2\n```\n\n- [x] done\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n[docs](https://example.org)"
    )
    assert "<h1>Title</h1>" in rendered
    assert "<strong>bold</strong>" in rendered and "<code>code</code>" in rendered
    assert '<pre><code class="language-python">x = 1 &lt; 2\n</code></pre>' in rendered
    assert "<th>a</th>" in rendered and "<td>1</td>" in rendered
    assert '<a href="https://example.org" rel="noopener noreferrer nofollow"' in rendered


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("<>/=\"' `*_[]()!#-|:\nabcjsvgx&;")), max_size=80))
def test_any_text_renders_safely(text: str):
    assert_safe(render_markdown(text))
