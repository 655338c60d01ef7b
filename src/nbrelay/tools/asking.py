"""Ask the person behind the client (MCP elicitation) before an act they should decide.

``ask`` puts one question (a form whose answer is a small pydantic model) to the client of the
tool call being handled, in the way its protocol revision has:

* 2026-07-28: the call answers with an ``InputRequiredResult`` holding the question
  (``InputNeeded``, which the tool boundary returns); the client asks the person and calls again
  with the answer in ``input_responses``, and the tool, run again from the start, finds it.
* earlier revisions: an ``elicitation/create`` request in the middle of the call, waited for at
  most ``ASK_SECONDS``.

It never blocks a client that cannot answer: one that did not declare the elicitation
capability (form mode), a connection that cannot carry a request to the client (stateless HTTP
on an older revision), or no answer in time gives ``None``, and the tool does what it did
before it could ask. Each tool says what a decline does.

A question's key carries a digest of its wording, so an answer is taken only for the question
the person saw: if the notebook changed between the rounds (more cells to delete, say), the
question changes and is asked again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import anyio
from mcp.server.elicitation import AcceptedElicitation, render_elicitation_schema
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, Field, ValidationError

from nbrelay.errors import InvalidArgument, NbrelayError

# How long an older client's person has to answer before the tool goes on as it would without
# asking (a host that shows the form but nobody is there).
ASK_SECONDS = 120.0
_INPUT_REQUIRED = "2026-07-28"

M = TypeVar("M", bound=BaseModel)
# The MCP context of the tool call being handled (set by the tool boundary).
_context: ContextVar[Any] = ContextVar("nbrelay_mcp_context", default=None)


@contextmanager
def through(ctx: Any) -> Iterator[None]:
    """Make ``ctx`` (the call's MCP ``Context``) the one questions go through while the block
    runs."""
    token = _context.set(ctx)
    try:
        yield
    finally:
        _context.reset(token)


def current_context() -> Any:
    return _context.get()


class InputNeeded(Exception):
    """Raised by ``ask`` on a 2026-07-28 call: the boundary answers the call with ``result``."""

    def __init__(self, result: InputRequiredResult) -> None:
        super().__init__("input required")
        self.result = result


@dataclass(frozen=True)
class Answer(Generic[M]):
    """What the person chose: ``accept`` with ``data``, or ``decline`` / ``cancel``."""

    action: Literal["accept", "decline", "cancel"]
    data: M | None = None

    @property
    def accepted(self) -> bool:
        return self.action == "accept" and self.data is not None


def can_ask() -> bool:
    """Whether the current call's client declared it can answer a form."""
    ctx = current_context()
    if ctx is None:
        return False
    try:
        caps = ctx.client_capabilities
    except (AttributeError, ValueError):  # outside a request
        return False
    found = caps.elicitation if caps is not None else None
    # A bare ``elicitation: {}`` (before modes existed) means form; url-only does not.
    return found is not None and (found.form is not None or found.url is None)


async def ask(name: str, message: str, schema: type[M]) -> Answer[M] | None:
    """Ask the person; ``None`` when the client cannot answer (see the module docstring)."""
    ctx = current_context()
    if ctx is None or not can_ask():
        return None
    request = ElicitRequest(
        params=ElicitRequestFormParams(
            message=message, requested_schema=render_elicitation_schema(schema)
        )
    )
    wording = request.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8")
    key = f"nbrelay.{name}.{hashlib.sha256(wording).hexdigest()[:16]}"
    version = ctx.protocol_version
    if version is not None and is_version_at_least(version, _INPUT_REQUIRED):
        answer = (ctx.input_responses or {}).get(key)
        if answer is None:
            raise InputNeeded(InputRequiredResult(input_requests={key: request}))
        if not isinstance(answer, ElicitResult):
            raise InvalidArgument(
                f"the answer to the question {name!r} is not an elicitation result.",
                hint="Answer the form that was sent, or call again without input_responses.",
            )
        return _answer(name, schema, answer.action, answer.content)
    if not ctx.session.can_send_request:
        return None
    with anyio.move_on_after(ASK_SECONDS):
        outcome = await ctx.elicit(message, schema)
        if isinstance(outcome, AcceptedElicitation):
            return Answer("accept", outcome.data)
        return Answer(outcome.action)
    return None


def _answer(name: str, schema: type[M], action: str, content: Any) -> Answer[M]:
    if action == "accept":
        try:
            return Answer("accept", schema.model_validate(content or {}))
        except ValidationError as exc:
            raise InvalidArgument(
                f"the answer to the question {name!r} does not fit its form: {exc.errors()[0]['msg']}.",
                hint="Answer with the fields the form asks for.",
            ) from exc
    return Answer("decline" if action == "decline" else "cancel")


class Declined(NbrelayError):
    """The person behind the client said no to an act they were asked about."""


class Confirm(BaseModel):
    """A yes/no form: accepted with ``confirm`` true is a yes."""

    confirm: bool = Field(default=True, title="Go ahead", description="Uncheck to refuse.")


async def confirm(name: str, message: str, *, refused: str, hint: str) -> None:
    """Ask the person to confirm an act; raise ``Declined`` (``refused``, ``hint``) when they
    decline, cancel or uncheck ``confirm``. A client that cannot answer is not asked, and the
    act goes ahead as it did before the server could ask."""
    answer = await ask(name, message, Confirm)
    if answer is None:
        return
    if answer.data is None or not answer.data.confirm:
        said = "cancelled" if answer.action == "cancel" else "declined"
        raise Declined(f"{refused} (the person {said} when asked).", hint=hint)
