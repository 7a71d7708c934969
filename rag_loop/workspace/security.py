"""The workspace treats production text as hostile and every form post as possibly forged.

- Text: HTML-escaped by the templates (autoescape), shown with `dir="auto"` in an isolated
  bidi context, its bidirectional control characters (RTL overrides) made visible as
  `[U+202E]`, and cut at `SHOWN_CHARS` with the count of what was left out.
- Forms: a double-submit token (a random cookie that every form echoes) and, when the browser
  sends one, an Origin that is this server; SameSite=Strict cookies.
- Pages: a Content-Security-Policy that runs only the vendored script and loads nothing from
  elsewhere, so even a rendering slip could not run a script or navigate.
- Access: bound to anything but loopback, every request needs the configured token (once per
  browser: `?token=…` sets a cookie).
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import secrets

SHOWN_CHARS = 20_000
_BIDI = re.compile("[\u200e\u200f\u202a-\u202e\u2066-\u2069\u061c]")
CSRF_COOKIE, TOKEN_COOKIE, CURATOR_COOKIE = "rl_csrf", "rl_token", "rl_curator"
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "same-origin",  # no-referrer would make the browser send Origin: null
           "X-Frame-Options": "DENY", "Cache-Control": "no-store"}


def shown(text: object, limit: int = SHOWN_CHARS) -> str:
    """Production text as it is displayed: bidi controls visible, at most `limit` characters."""
    if text is None:
        return ""
    value = _BIDI.sub(lambda m: f"[U+{ord(m.group()):04X}]", str(text))
    if len(value) > limit:
        return f"{value[:limit]} … ({len(value) - limit:,} more characters)"
    return value


def new_token() -> str:
    return secrets.token_urlsafe(32)


def same(a: str | None, b: str | None) -> bool:
    return bool(a) and bool(b) and hmac.compare_digest(str(a), str(b))


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def origin_allowed(origin: str | None, host: str | None) -> bool:
    """A form post's Origin must be this server (absent: allowed, the token still decides)."""
    if not origin or origin == "null":
        return origin is None
    return bool(host) and origin.split("://", 1)[-1] == host
