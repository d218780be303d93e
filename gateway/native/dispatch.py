"""How the native listener's commands are served: each handler takes its command's typed request
(``protocol.messages``) and the payload, and answers a value, a store future or a Deferred of one
(``handler.NativeProtocol`` says how each is written back)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

from millrace.protocol.messages import Request
from millrace.protocol.wire import Command

#: A command's handler: (request, payload) -> its outcome.
Handler = Callable[[Request, bytes], object]
Handlers = dict[Command, Handler]

_Req = TypeVar("_Req", bound=Request)


def serve(request: type[_Req], fn: Callable[[_Req, bytes], object]) -> tuple[Command, Handler]:
    """The registry entry of ``request``'s command, served by ``fn`` (which takes that request type).
    No check per call: the listener decodes a header into the class registered for its command
    (``protocol.messages.decode_request``), which is this one."""
    return request.command, cast(Handler, fn)


def handlers(*entries: tuple[Command, Handler]) -> Handlers:
    return dict(entries)
