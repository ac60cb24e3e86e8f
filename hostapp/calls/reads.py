"""Reads of what servers offer besides tools: a resource read, a prompt filled in. The one
way in, for people (the catalog's pages), the CLI and agents (/mcp): each read is checked,
sent and put on record (`Read`) here.

A read is refused (and on record as refused) when its server is disabled or blocked by a
server-wide rule, when a prompt is quarantined, when a resource's URI is made from a
quarantined template (and not listed by its server), or when it lies outside the agent's
view: whoever reads, by a page's form or by a raw URI.
Otherwise it goes to the server, and the row says how it ended, how long it took and how
much came back (the contents themselves are not kept). Resources are read-only by nature,
so no approval is asked; the rules that refuse a server's calls refuse its reads too.

A 2026-07-28 server may answer a read with a round of requests for input (`input_required`)
instead: an agent that answers its own rounds is handed it (`Rounds`), and the read is on
record as one that asked for input; the agent's read made again with its answers is a read
of its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone
from mcp import InvalidUriTemplate, UriTemplate

from hostapp.catalog.models import Offer, Prompt, Resource, ResourceTemplate, Server
from hostapp.catalog.pool import apool_for, pool_for
from hostapp.core.jsonvalues import storable
from hostapp.mcp import McpFailure, Rounds, input_required
from hostapp.mcp.sanitize import clean_text

from . import inputs
from .actions import Requester
from .models import Read, Rule

# A prompt's arguments: strings (the protocol's type), this many and this long at most.
MAX_PROMPT_ARGUMENTS = 50
MAX_ARGUMENT_CHARS = 20_000
MAX_URI_CHARS = 4000


class ReadError(Exception):
    """The read cannot be made; `status` is what a view answers (404: no such thing for
    this requester; 403: refused; 400: bad input)."""

    def __init__(self, message: str, status: int = 400, read: Read | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.read = read


@dataclass(frozen=True)
class ReadOutcome:
    read: Read
    # ReadResourceResult / GetPromptResult, or (with `Rounds`) an InputRequiredResult, as plain data
    result: dict[str, Any] | None
    failure: McpFailure | None


def prompt_named(exposed_name: str) -> Prompt:
    """The prompt of this exposed name (with its server), or ReadError 404."""
    prompt = Prompt.objects.select_related("server").filter(exposed_name=exposed_name).first()
    if prompt is None:
        raise ReadError(f"no prompt named {exposed_name!r}", status=404)
    return prompt


def prompt_arguments(prompt: Prompt, arguments: Any) -> dict[str, str]:
    """`arguments` as the prompt takes them (strings), or ReadError naming what is wrong:
    not an object, a value that is not a string, an argument the prompt does not declare,
    a required one missing."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ReadError("a prompt's arguments are an object of strings")
    if len(arguments) > MAX_PROMPT_ARGUMENTS:
        raise ReadError(f"at most {MAX_PROMPT_ARGUMENTS} arguments")
    declared = {str(a.get("name")): a for a in prompt.arguments if a.get("name")}
    out: dict[str, str] = {}
    for name, value in arguments.items():
        if name not in declared:
            raise ReadError(f"{prompt.exposed_name} takes no argument {str(name)[:80]!r}")
        if not isinstance(value, str):
            raise ReadError(f"the argument {name!r} must be a string")
        if len(value) > MAX_ARGUMENT_CHARS:
            raise ReadError(f"the argument {name!r} is longer than {MAX_ARGUMENT_CHARS} characters")
        out[name] = storable(value)
    missing = [n for n, a in declared.items() if a.get("required") and not out.get(n)]
    if missing:
        raise ReadError(
            f"{prompt.exposed_name} needs the argument{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
        )
    return out


def _quarantined_template(server: Server, uri: str) -> str | None:
    """The quarantined resource template of `server` that `uri` is made from, if any, and
    the server does not list `uri` itself (RFC 6570 matching, the SDK's `UriTemplate`)."""
    waiting = ResourceTemplate.objects.filter(server_id=server.pk).exclude(status=Offer.ACTIVE)
    for text in waiting.values_list("uri_template", flat=True):
        try:
            made = UriTemplate.parse(text).match(uri) is not None
        except InvalidUriTemplate:  # nothing can be made from it, through the host or not
            continue
        if made and not Resource.objects.filter(server_id=server.pk, uri=uri).exists():
            return text
    return None


def _refusal(server: Server, requester: Requester, prompt: Prompt | None, uri: str = "") -> tuple[str, int] | None:
    """Why this read may not be made, and the status to answer with; None if it may. The
    server's state and the prompt's (or the templates') are read afresh: the rows given may
    come from a list kept in memory (the agents' endpoint)."""
    agent = requester.agent
    if agent is not None:
        seen = agent.may_use(server.name) if prompt is None else agent.view.sees_prompt(prompt)
        if not seen:  # to the agent it does not exist
            return f"outside the view of the agent {requester.name}", 404
    if prompt is not None:
        now = Prompt.objects.filter(pk=prompt.pk).values_list("status", "server__enabled").first()
        if now is None:
            return f"no prompt named {prompt.exposed_name!r}", 404
        status, enabled = now
    else:
        status = ""
        enabled = bool(Server.objects.filter(pk=server.pk).values_list("enabled", flat=True).first())
    if not enabled:
        return f"the server {server.name} is disabled", 403
    if prompt is not None and status != Prompt.ACTIVE:
        return f"{prompt.exposed_name} is quarantined: a person must review it first", 403
    if prompt is None and (template := _quarantined_template(server, uri)) is not None:
        return f"the resource template {clean_text(template, 200)} is quarantined: a person must review it first", 403
    rule = Rule.objects.filter(server_name=server.name, tool_name="", action=Rule.BLOCK).first()
    if rule is not None:
        return rule.reason or f"the server {server.name} is blocked by a server rule", 403
    return None


def decoded_size(blob: str) -> int:
    """How many bytes a base64 text holds (its padding is none of them)."""
    data = "".join(blob.split())
    return max(0, len(data) * 3 // 4 - (len(data) - len(data.rstrip("="))))


def _parts(kind: str, result: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """How much came back (bytes) and each part's type, for the record."""
    size, parts = 0, []
    items = result.get("contents") if kind == Read.RESOURCE else result.get("messages")
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        if kind == Read.PROMPT:
            content: dict[str, Any] = item["content"] if isinstance(item.get("content"), dict) else {}
            part = {"role": str(item.get("role", ""))[:20], "type": str(content.get("type", ""))[:40]}
        else:
            part = {"mimeType": str(item.get("mimeType") or "")[:200]}
            content = item
        text, blob = content.get("text"), content.get("data") or content.get("blob")
        n = len(text.encode()) if isinstance(text, str) else (decoded_size(blob) if isinstance(blob, str) else 0)
        size += n
        parts.append({**part, "bytes": n})
        if len(parts) >= 100:
            break
    return size, parts


def _row(
    kind: str,
    server: Server,
    target: str,
    requester: Requester,
    arguments: dict[str, str],
    started_at: Any,
) -> Read:
    return Read(
        created_at=started_at,
        requester_kind=requester.kind,
        requester_user_id=getattr(requester.user, "pk", None),
        requester_name=requester.name,
        requester_agent_id=getattr(requester.agent, "pk", None),
        server_name=server.name,
        kind=kind,
        target=target,
        arguments=arguments,
    )


def _check(
    kind: str, server: Server, target: str, requester: Requester, arguments: dict[str, str], prompt: Any
) -> Read:
    """The unsaved row of a read that may go on, or ReadError (the refusal on record)."""
    row = _row(kind, server, target, requester, arguments, timezone.now())
    refused = _refusal(server, requester, prompt, target if prompt is None else "")
    if refused is not None:
        reason, status = refused
        row.outcome, row.error = Read.REFUSED, {"kind": "policy", "message": reason}
        row.save()
        shown = f"no prompt named {target!r}" if status == 404 and prompt is not None else reason
        if status == 404 and prompt is None:
            shown = f"no server {server.name!r}"
        raise ReadError(shown, status=status, read=row)
    return row


def _finish(row: Read, result: dict[str, Any] | None, failure: McpFailure | None, seconds: float) -> ReadOutcome:
    row.duration_ms = seconds * 1000
    if failure is None and result is not None and input_required(result):
        requests = result.get("inputRequests")
        requests = requests if isinstance(requests, dict) else {}
        try:
            inputs.check_round(row.server_name, requests)
        except inputs.InvalidAsk as exc:
            result, failure = None, exc.failure()
        else:
            row.outcome = Read.INPUT
            row.parts = [
                {"key": str(key)[:200], "method": str(request.get("method", ""))[:60]}
                for key, request in list(requests.items())[:100]
                if isinstance(request, dict)
            ]
            row.save()
            return ReadOutcome(row, result, None)
    if failure is not None:
        row.outcome, row.error = Read.FAILED, storable(failure.as_dict())
    else:
        row.outcome = Read.OK
        row.size, row.parts = _parts(row.kind, result or {})
    row.save()
    return ReadOutcome(row, result, failure)


def _uri(uri: Any) -> str:
    if not isinstance(uri, str) or not uri.strip():
        raise ReadError("a resource's URI is a non-empty string")
    if len(uri) > MAX_URI_CHARS:
        raise ReadError(f"a resource's URI is at most {MAX_URI_CHARS} characters")
    return storable(uri)


def read_resource(server: Server, uri: Any, requester: Requester) -> ReadOutcome:
    """Read `uri` from `server`, on record (ReadError when it may not be read)."""
    uri = _uri(uri)
    row = _check(Read.RESOURCE, server, uri, requester, {}, None)
    started = time.perf_counter()
    try:
        result, failure = pool_for(server).read_resource(server.name, uri), None
    except McpFailure as exc:
        result, failure = None, exc
    return _finish(row, result, failure, time.perf_counter() - started)


def _given(arguments: Any) -> dict[str, str]:
    """A prompt's arguments as a refused read keeps them (what could be kept of them)."""
    if not isinstance(arguments, dict):
        return {}
    return {str(k)[:200]: str(v)[:MAX_ARGUMENT_CHARS] for k, v in list(arguments.items())[:MAX_PROMPT_ARGUMENTS]}


def _prompt_row(prompt: Prompt, arguments: Any, requester: Requester) -> tuple[Read, dict[str, str]]:
    """The row of a prompt's read and its checked arguments: a refusal first (on record
    whatever the arguments), then the arguments (ReadError, 400)."""
    row = _check(Read.PROMPT, prompt.server, prompt.exposed_name, requester, storable(_given(arguments)), prompt)
    row.arguments = prompt_arguments(prompt, arguments)
    return row, row.arguments


def get_prompt(prompt: Prompt, arguments: Any, requester: Requester) -> ReadOutcome:
    """Fill `prompt` in with `arguments`, on record (ReadError when it may not be)."""
    row, checked = _prompt_row(prompt, arguments, requester)
    started = time.perf_counter()
    try:
        result = pool_for(prompt.server).get_prompt(prompt.server.name, prompt.original_name, checked)
        failure = None
    except McpFailure as exc:
        result, failure = None, exc
    return _finish(row, result, failure, time.perf_counter() - started)


async def aread_resource(server: Server, uri: Any, requester: Requester, rounds: Rounds | None = None) -> ReadOutcome:
    """:func:`read_resource` for async callers (the agents' endpoint): no thread waits on the
    server. With `rounds`, the requester answers the server's rounds of input itself (`Rounds`)."""
    uri = _uri(uri)
    row = await sync_to_async(_check, thread_sensitive=False)(Read.RESOURCE, server, uri, requester, {}, None)
    pool = await apool_for(server)
    started = time.perf_counter()
    try:
        result, failure = await pool.aread_resource(server.name, uri, rounds=rounds), None
    except McpFailure as exc:
        result, failure = None, exc
    return await sync_to_async(_finish, thread_sensitive=False)(row, result, failure, time.perf_counter() - started)


async def aget_prompt(
    prompt: Prompt, arguments: Any, requester: Requester, rounds: Rounds | None = None
) -> ReadOutcome:
    """:func:`get_prompt` for async callers; `rounds` as in :func:`aread_resource`."""
    row, checked = await sync_to_async(_prompt_row, thread_sensitive=False)(prompt, arguments, requester)
    server = prompt.server
    pool = await apool_for(server)
    started = time.perf_counter()
    try:
        result, failure = await pool.aget_prompt(server.name, prompt.original_name, checked, rounds=rounds), None
    except McpFailure as exc:
        result, failure = None, exc
    return await sync_to_async(_finish, thread_sensitive=False)(row, result, failure, time.perf_counter() - started)
