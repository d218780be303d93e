"""How the native listener's commands are served: each handler takes its command's typed request
(``protocol.messages``) and the payload, and answers a value, a store future or a Deferred of one
(``handler.NativeProtocol`` says how each is written back)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from millrace.protocol.errors import InvalidRequestError
from millrace.protocol.messages import Request
from millrace.protocol.wire import Command

#: A command's handler: (request, payload) -> its outcome.
Handler = Callable[[Request, bytes], object]
Handlers = dict[Command, Handler]

_Req = TypeVar("_Req", bound=Request)


def serve(request: type[_Req], fn: Callable[[_Req, bytes], object]) -> tuple[Command, Handler]:
    """The registry entry of ``request``'s command, served by ``fn`` (which takes that request type)."""

    def handle(message: Request, payload: bytes) -> object:
        if not isinstance(message, request):  # the listener decodes by command: a wiring mistake
            raise InvalidRequestError(f"{request.command.name} got a {type(message).__name__}")
        return fn(message, payload)

    return request.command, handle


def handlers(*entries: tuple[Command, Handler]) -> Handlers:
    return dict(entries)
