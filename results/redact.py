"""Credentials out of text that is stored or shown: :func:`redact_credentials`.

In ``results`` because everything that writes a URL a user typed sits on it: the manifest's
command line (the application), the ``openai`` adapter's messages and effective configuration,
and the reports (``reports.writer``, ``reports.search``). Standard library only.
"""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@\s:]*)(?P<password>:[^/@\s]*)?@")


def redact_credentials(text: str) -> str:
    """Every URL's credentials in ``text`` masked: ``http://user:key@host`` →
    ``http://user:***@host``, a bare token ``https://TOKEN@host`` → ``https://***@host``
    (RFC 3986 userinfo; the user name of a ``user:password`` pair is kept so a reader can tell
    which account was used). Text without credentials is returned unchanged."""

    def mask(m: re.Match[str]) -> str:
        if m["password"] is not None:
            return f"{m['scheme']}{m['user']}:***@"
        return f"{m['scheme']}***@" if m["user"] else m[0]

    return _USERINFO.sub(mask, text)
