"""The workspace treats production text as hostile and every form post as possibly forged.

- Text: HTML-escaped by the templates (autoescape), shown with `dir="auto"` in an isolated
  bidi context, its bidirectional control characters (RTL overrides) made visible as
  `[U+202E]`, and cut at `SHOWN_CHARS` with the count of what was left out.
- Forms: a double-submit token (a random cookie that every form echoes) and, when the browser
  sends one, an Origin that is this server; SameSite=Strict cookies.
- Pages: a Content-Security-Policy that runs only the vendored script and loads nothing from
  elsewhere, so even a rendering slip could not run a script or navigate.
- Access: bound to anything but a loopback address, every request needs the configured token
  (once per browser: `?token=…` sets a cookie). Every request must name, in its Host header, a
  host the server was started for (`served_hosts`): a page of another site whose name was
  rebound to this machine's address (DNS rebinding) is refused before it reaches the app.
- Size: a request body is at most `MAX_BODY_BYTES` (`BodyLimit`), so one post cannot fill the
  memory or a label file.
- Reports (`/reports/`): their own policy, inline styles and images only, sandboxed (no
  script, an origin of their own).
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import secrets
import socket
from collections.abc import Sequence
from urllib.parse import quote, urlencode

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SHOWN_CHARS = 20_000
_BIDI = re.compile("[\u200e\u200f\u202a-\u202e\u2066-\u2069\u061c]")
CSRF_COOKIE, TOKEN_COOKIE, CURATOR_COOKIE = "rl_csrf", "rl_token", "rl_curator"
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "same-origin",  # no-referrer would make the browser send Origin: null
           "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
# a report is one self-contained file (inline <style>, data: images, no script): sandboxed, so
# even a script in one could not run nor reach the workspace's origin
REPORT_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; "
                 "base-uri 'none'; frame-ancestors 'none'; sandbox")
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
# the largest form a curator sends: an expected output of 20,000 characters of 4-byte UTF-8,
# URL-encoded (240 kB), with room for the rest
MAX_BODY_BYTES = 512 * 1024
TOO_LARGE = (f"413: the form is larger than {MAX_BODY_BYTES // 1024} KiB, the most the workspace reads (an "
             "expected output may have 20,000 characters). Nothing was saved: go back (what you typed is "
             "still in the form), shorten it and save again.")


def shown(text: object, limit: int = SHOWN_CHARS) -> str:
    """Production text as it is displayed: bidi controls visible, at most `limit` characters."""
    if text is None:
        return ""
    value = _BIDI.sub(lambda m: f"[U+{ord(m.group()):04X}]", str(text))
    if len(value) > limit:
        return f"{value[:limit]} … ({len(value) - limit:,} more characters)"
    return value


def visible_controls(text: str) -> str:
    """`text` with its bidirectional controls made visible (`[U+202E]`), nothing else changed:
    safe on HTML, whose tags never hold one."""
    return _BIDI.sub(lambda m: f"[U+{ord(m.group()):04X}]", text)


def new_token() -> str:
    return secrets.token_urlsafe(32)


def same(a: str | None, b: str | None) -> bool:
    return bool(a) and bool(b) and hmac.compare_digest(str(a), str(b))


def is_loopback(host: str) -> bool:
    """Whether binding `host` listens on loopback only: a loopback address, or a name whose every
    address is one. "" and 0.0.0.0 / :: listen on every interface; an unknown name is not loopback."""
    name = host.strip().removeprefix("[").removesuffix("]")
    if not name:
        return False
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(name, None)}
    except (OSError, UnicodeError):
        return False
    return bool(addresses) and all(ipaddress.ip_address(a.partition("%")[0]).is_loopback for a in addresses)


def is_everywhere(host: str) -> bool:
    """Whether binding `host` listens on every interface ("", 0.0.0.0, ::)."""
    name = host.strip().removeprefix("[").removesuffix("]")
    try:
        return not name or ipaddress.ip_address(name).is_unspecified
    except ValueError:
        return False


def served_hosts(host: str, allowed: Sequence[str] = ()) -> list[str]:
    """The Host header values the server accepts (port aside): the bound address and `allowed`,
    plus localhost, 127.0.0.1 and [::1] on loopback. Bound to every interface the names curators
    use cannot be guessed: `allowed` must name them (a ValueError otherwise)."""
    hosts = [h.strip().lower() for h in allowed if h.strip()]
    if is_everywhere(host) and not hosts:
        raise ValueError(f"--host {host!r} listens on every interface: name the host names curators open "
                         "the workspace by with --allowed-host (e.g. --allowed-host curation.example.org)")
    if not is_everywhere(host):
        name = host.strip().lower()
        hosts.append(f"[{name}]" if ":" in name and not name.startswith("[") else name)
    if is_loopback(host):
        hosts += LOOPBACK_HOSTS
    return list(dict.fromkeys(hosts))


def local_path(path: str) -> str:
    """A path to redirect to that stays on this server: `//evil.example/` is another site."""
    return "/" + path.lstrip("/\\")


def path_part(value: object) -> str:
    """A value as one URL path segment: `/` encoded too, so `a/../b` is not resolved away."""
    return quote(str(value), safe="")


# path segments a browser resolves away even percent-encoded (WHATWG URL: "%2e" is a dot)
_DOT_SEGMENTS = frozenset(["", ".", ".."])


def trace_url(trace_id: object, page: str = "/trace") -> str:
    """The workspace's address of a trace's page (or its `/check`): the id as one path segment,
    or as the `id` parameter when it is empty, `.` or `..`, which no path can carry."""
    text = str(trace_id)
    return f"{page}?{urlencode({'id': text})}" if text in _DOT_SEGMENTS else f"{page}/{path_part(text)}"


class TooLarge(Exception):
    """A request body over the limit."""


class BodyLimit:
    """Refuses a request body over `limit` bytes (413, with why): by its Content-Length before
    reading it, else as it streams in. Starlette has no such middleware; uvicorn limits headers only."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES):
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = Headers(scope=scope).get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await self.refuse(scope, receive, send)
        received, started = 0, False

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise TooLarge
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, sending)
        except TooLarge:
            if started:
                raise
            await self.refuse(scope, receive, send)

    async def refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = PlainTextResponse(TOO_LARGE, status_code=413, headers=HEADERS | {"Connection": "close"})
        await response(scope, receive, send)


def origin_allowed(origin: str | None, host: str | None) -> bool:
    """A form post's Origin must be this server (absent: allowed, the token still decides)."""
    if not origin or origin == "null":
        return origin is None
    return bool(host) and origin.split("://", 1)[-1] == host
