"""Credentials out of what is shown: ``user:secret@`` in a URL becomes ``***@``.

A leaf of ``index/``: pip's configuration (``pipconf.py``), the network (``net.py``) and every
message that names a source use it, and it imports nothing of theirs.
"""

from __future__ import annotations

import re

_CRED = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<cred>[^/@\s]+)@")


def redact(text: str) -> str:
    """Replace ``user:secret@`` in every URL inside ``text`` with ``***@``."""
    return _CRED.sub(lambda m: f"{m.group('scheme')}***@", text)
