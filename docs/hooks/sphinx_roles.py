"""MkDocs hook: render the Sphinx markup of kernelkit's docstrings.

The docstrings use Sphinx roles (``:class:`~kernelkit.features.SDERF```, ``:func:`a_star```)
so that they read well in ``help()`` and IDEs; mkdocstrings renders them as the literal
role followed by a code span. This hook drops the role, keeps the code span and, as Sphinx
does for a leading ``~``, shows only the last component of the dotted name. A paragraph
that ends in ``::`` (reST's marker of the literal block after it) ends in ``:``, as Sphinx
shows it.
"""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc):<code>(~?)([^<]*)</code>")
_LITERAL_MARKER = re.compile(r"(?<=[^\s:])::(?=</p>)")


def _code(match: re.Match) -> str:
    tilde, name = match.groups()
    if tilde:
        name = name.rsplit(".", 1)[-1]
    return f"<code>{name}</code>"


def render_roles(html: str) -> str:
    """``html`` with every ``:role:<code>[~]name</code>`` replaced by ``<code>name</code>``
    and every paragraph-ending ``text::`` by ``text:``."""
    return _LITERAL_MARKER.sub(":", _ROLE.sub(_code, html))


def on_page_content(html, page, config, files):
    return render_roles(html)
