"""Chat markdown: model output becomes readable, highlighted HTML that can never run script."""

from __future__ import annotations

import re
import time
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2 import Environment
from markupsafe import Markup

from mlx_manager.services.markdown import pygments_css, render_markdown

PYGMENTS_CSS = Path(str(files("mlx_manager") / "static" / "pygments.css"))
APP_CSS = PYGMENTS_CSS.with_name("app.css")
COPY_BUTTON = '<button type="button" class="copy-button" data-copy>Copy</button>'
ALLOWED_TAGS = {
    *("p", "br", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "blockquote", "ul", "ol", "li"),
    *("em", "strong", "s", "code", "pre", "a", "div", "span", "button"),
    *("table", "thead", "tbody", "tr", "th", "td"),
}
ALLOWED_ATTRS = {"href", "title", "target", "rel", "class", "type", "data-copy", "start"}
TABLE_ALIGN = re.compile(r"text-align:(left|center|right)")
BAD_SCHEMES = {"javascript", "vbscript", "file", "data"}
SAFE_DATA_URL = re.compile(r"data:image/(gif|png|jpeg|webp);")


class Page(HTMLParser):
    """Tags, attributes and visible text of rendered HTML, as a browser would read them."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.chunks: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def links(self) -> list[dict[str, str | None]]:
        return [attrs for tag, attrs in self.tags if tag == "a"]


def unsafe_href(href: str) -> bool:
    """Would a browser run or load this URL? It drops tabs/newlines and edge whitespace first."""
    url = re.sub(r"[\t\n\r]", "", href).strip(" \x00-\x1f").lower()
    scheme = re.match(r"([a-z][a-z0-9+.-]*):", url)
    return scheme is not None and scheme[1] in BAD_SCHEMES and not SAFE_DATA_URL.match(url)


def assert_inert(html: str) -> None:
    lowered = html.lower()
    for opening in ("<script", "<img", "<iframe", "<svg", "<object", "<embed", "<style"):
        assert opening not in lowered, html
    for tag, attrs in Page(html).tags:
        assert tag in ALLOWED_TAGS, html
        for name, value in attrs.items():
            assert not name.startswith("on"), html
            if name == "style":  # only table alignment, written by markdown-it itself
                assert tag in ("th", "td") and TABLE_ALIGN.fullmatch(value or ""), html
            else:
                assert name in ALLOWED_ATTRS, html
            if name == "href":
                assert not unsafe_href(value or ""), html


# --- ordinary markdown -------------------------------------------------------------------


def test_render_returns_markup_that_templates_do_not_escape_again() -> None:
    html = render_markdown("**bold**")
    assert isinstance(html, Markup)
    assert "<strong>bold</strong>" in Environment(autoescape=True).from_string("{{ m }}").render(m=html)


def test_headings_lists_emphasis_and_quotes_render() -> None:
    html = render_markdown(
        "# Title\n## Sub\n\n- one\n- two\n\n3. three\n\n*em* **strong** ~~gone~~ `x`\n\n> q\n"
    )
    assert "<h1>Title</h1>" in html and "<h2>Sub</h2>" in html
    assert "<ul>\n<li>one</li>\n<li>two</li>\n</ul>" in html
    assert '<ol start="3">' in html
    assert "<em>em</em>" in html and "<strong>strong</strong>" in html
    assert "<s>gone</s>" in html and "<code>x</code>" in html
    assert "<blockquote>" in html


def test_gfm_table_renders() -> None:
    html = render_markdown("| name | size |\n|:-----|-----:|\n| qwen | 4 GB |")
    assert '<th style="text-align:left">name</th>' in html
    assert '<td style="text-align:right">4 GB</td>' in html


def test_single_newline_is_a_line_break() -> None:
    assert render_markdown("first\nsecond") == "<p>first<br />\nsecond</p>\n"


def test_bare_urls_stay_text_because_linkify_is_off() -> None:
    assert "<a" not in render_markdown("see https://example.com for more")


# --- code blocks -------------------------------------------------------------------------

PYTHON_CODE = '\nif a < b and c & d:\n    print("<b>")\n'


def _pre_html(html: str) -> str:
    found = re.search(r"<pre><code>(.*)</code></pre>", html, re.DOTALL)
    assert found, html
    return found[1]


@pytest.mark.parametrize("language", ["python", "py", "Python"])
def test_fence_is_highlighted_by_its_language(language: str) -> None:
    html = render_markdown(f"```{language}\ndef f():\n    return 1\n```")
    assert html.startswith(
        f'<div class="code-block"><div class="code-head"><span class="code-lang">{language}</span>'
        f"{COPY_BUTTON}</div><pre><code>"
    )
    assert '<span class="k">def</span>' in html and '<span class="k">return</span>' in html


def test_highlighted_code_copies_back_exactly_as_written() -> None:
    html = render_markdown(f"```python\n{PYTHON_CODE}```")
    assert '<span class="nb">print</span>' in html
    assert Page(_pre_html(html)).text == PYTHON_CODE


def test_unknown_language_is_plain_escaped_text() -> None:
    html = render_markdown(f"```nosuchlang\n{PYTHON_CODE}```")
    assert '<span class="code-lang">nosuchlang</span>' in html and COPY_BUTTON in html
    assert "<span" not in _pre_html(html)
    assert Page(_pre_html(html)).text == PYTHON_CODE


def test_fence_without_language_is_not_guessed() -> None:
    html = render_markdown("```\nimport os\ndef f():\n    return os.sep\n```")
    assert '<span class="code-lang">text</span>' in html
    assert "<span" not in _pre_html(html)


def test_indented_code_gets_the_same_block_and_copy_button() -> None:
    html = render_markdown("Run:\n\n    make test\n")
    assert f'<span class="code-lang">text</span>{COPY_BUTTON}</div><pre><code>make test\n' in html


def test_every_code_block_has_its_own_copy_button() -> None:
    html = render_markdown("```sh\nls\n```\n\ntext\n\n```json\n{}\n```")
    assert html.count(COPY_BUTTON) == 2


# --- links and images --------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    ["[x](https://example.com)", "<https://example.com>", "<user@example.com>", "[x][r]\n\n[r]: /models"],
)
def test_links_open_in_a_new_tab_without_referrer_or_opener(source: str) -> None:
    [link] = Page(render_markdown(source)).links()
    assert link["target"] == "_blank"
    assert link["rel"] == "noopener noreferrer nofollow"


def test_image_becomes_a_link_so_nothing_is_fetched() -> None:
    html = render_markdown('![a chart](https://evil.example/p.png "t")')
    assert "<img" not in html
    assert Page(html).links() == [
        {"href": "https://evil.example/p.png", "target": "_blank", "rel": "noopener noreferrer nofollow"}
    ]
    assert Page(html).text.strip() == "a chart"


def test_image_without_alt_text_shows_its_url() -> None:
    assert Page(render_markdown("![](https://e.example/p.png)")).text.strip() == "https://e.example/p.png"


def test_image_inside_a_link_keeps_only_the_outer_link() -> None:
    html = render_markdown("[![build](https://ci.example/b.svg)](https://ci.example)")
    assert [link["href"] for link in Page(html).links()] == ["https://ci.example"]
    assert Page(html).text.strip() == "build"


@pytest.mark.parametrize(
    "source",
    [
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](&#106;avascript:alert(1))",
        "[x](<javascript:alert(1)>)",
        "[x](vbscript:msgbox(1))",
        "[x](file:///etc/passwd)",
        "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
        "![x](data:image/svg+xml;base64,PHN2Zz4=)",
        "<javascript:alert(1)>",
        "[x][r]\n\n[r]: javascript:alert(1)",
    ],
)
def test_dangerous_link_targets_are_refused(source: str) -> None:
    html = render_markdown(source)
    assert "<a" not in html
    assert_inert(html)


# --- model output that tries to inject ---------------------------------------------------

TABLE_WITH_HTML = "| a | b |\n|---|---|\n| <img src=x onerror=alert(1)> | <b style=x onclick=y>z</b> |"


@pytest.mark.parametrize(
    ("source", "visible"),
    [
        ("<script>alert(1)</script>", "<script>alert(1)</script>"),
        ("<img src=x onerror=alert(1)>", "<img src=x onerror=alert(1)>"),
        ("[x](javascript:alert(1))", "[x](javascript:alert(1))"),
        ("[x](JaVaScRiPt:alert(1))", "[x](JaVaScRiPt:alert(1))"),
        ("![x](https://evil.example/p.png)", "x"),
        ('<a href="javascript:alert(1)">x</a>', '<a href="javascript:alert(1)">x</a>'),
        ("<svg onload=alert(1)>", "<svg onload=alert(1)>"),
        ("<iframe src=https://evil.example></iframe>", "<iframe src=https://evil.example></iframe>"),
        ('<div style="position:fixed">x</div>', '<div style="position:fixed">x</div>'),
        (TABLE_WITH_HTML, "<img src=x onerror=alert(1)>"),
        (TABLE_WITH_HTML, "<b style=x onclick=y>z</b>"),
        ('```"><script>alert(1)</script>\ncode\n```', '"><script>alert(1)</script>'),
        ("```html\n<script>alert(1)</script>\n```", "<script>alert(1)</script>"),
        ("&lt;script&gt;alert(1)&lt;/script&gt;", "<script>alert(1)</script>"),
        ("<javascript:alert(1)>", "<javascript:alert(1)>"),
        ("[x](<java\tscript:alert(1)>)", "x"),
        ("*<script>a</script>*", "<script>a</script>"),
    ],
)
def test_injection_is_rendered_inert_and_shown_as_text(source: str, visible: str) -> None:
    html = render_markdown(source)
    assert_inert(html)
    assert visible in Page(html).text


def test_inert_check_catches_an_unsafe_rendering() -> None:
    """The checks above must be able to fail."""
    for unsafe in (
        "<p><script>x</script></p>",
        '<p><a href="x" onclick="y">x</a></p>',
        '<p><a href=" JavaScript:alert(1)">x</a></p>',
        '<p><a href="java&#9;script:alert(1)">x</a></p>',
        '<p style="color:red">x</p>',
        "<p><img src=x></p>",
    ):
        with pytest.raises(AssertionError):
            assert_inert(unsafe)


FRAGMENTS = [
    *("<script>", "</script>", "<img src=x onerror=alert(1)>", "<svg onload=alert(1)>", " onclick=", "<"),
    *(">", '"', "'", "=", "`", "```", "```python\n", "~~~", "\n", "\n\n", "    ", "> ", "- ", "1. "),
    *("[", "]", "](", ")", "![", "javascript:", "JaVaScRiPt:", "data:text/html,", "https://e.example"),
    *("&lt;", "&#106;", "&quot;", "&", "*", "_", "|", "|---|", "\\", "style=", "<a href=", "</a>"),
]


@settings(max_examples=400, deadline=None)
@given(pieces=st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), max_size=24))
def test_no_text_ever_renders_script_or_event_handlers(pieces: list[str]) -> None:
    html = render_markdown("".join(pieces))
    assert "<script" not in html.lower()
    assert_inert(html)


# --- stylesheet and speed ----------------------------------------------------------------


def test_shipped_stylesheet_is_what_pygments_css_generates() -> None:
    """Regenerate with: python -m mlx_manager.services.markdown > mlx_manager/static/pygments.css"""
    assert PYGMENTS_CSS.read_text(encoding="utf-8") == pygments_css()


def test_stylesheet_styles_the_block_and_both_colour_schemes() -> None:
    css = pygments_css()
    chrome = APP_CSS.read_text(encoding="utf-8")  # the block's frame, header and copy button
    for selector in (".code-block {", ".code-head {", ".code-lang {", ".copy-button {"):
        assert selector in chrome
    assert ".copy-button" not in css  # the chrome is written once, in app.css
    assert "@media (prefers-color-scheme: light)" in css and "@media (prefers-color-scheme: dark)" in css
    assert css.count(".code-block .k {") == 2  # keyword colour in each scheme
    assert "\npre " not in css and "td.linenos" not in css  # nothing outside .code-block


def test_a_20kb_reply_renders_in_milliseconds() -> None:
    paragraph = (
        "The pool keeps weights resident while memory allows; a model that would exceed the budget "
        "evicts the least recently used one. **Note:** `max_tokens` bounds the KV cache, see "
        "[the docs](https://example.com/docs).\n\n"
    )
    section = (
        f"## Step\n\n{paragraph * 3}| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "```python\nfor i in range(10):\n    print(i)\n```\n\n"
    )
    reply = section * (20_000 // len(section))
    render_markdown(reply)  # warm the lexer cache
    best = min(_timed(reply) for _ in range(3))
    assert best < 0.2, f"{best * 1000:.1f} ms for {len(reply)} characters"


def _timed(text: str) -> float:
    start = time.perf_counter()
    render_markdown(text)
    return time.perf_counter() - start
