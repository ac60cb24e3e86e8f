"""What agents are given of what servers offer besides tools: prompts, resources and
resource templates, each agent's by its view, in memory (loaded with the tools: one catalog).

Prompts are named as tools are: `<server>__<prompt>` in a prefixed view, the server's own
name in a view of one server without the prefix. Only active prompts and templates are
given (a new or changed one waits for a review), with the host's cleaned texts.

Resource URIs stay the server's own where they cannot collide: in a view of one server
without the prefix, and for `ui://` resources (MCP Apps name their server in the URI, and a
tool's UI metadata points at it unchanged). Every other URI is given as
`patchbay://<server>/<the server's URI>` (templates too: the variables stay in the tail), so
that a URI maps back to exactly one server whatever the other servers offer. A URI the
agent got elsewhere unchanged (a tool's `resource_link`, say) is routed to the one server in
its view that lists it; where two do, the agent is told to use the prefixed form.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from pydantic import ValidationError

from hostapp.catalog.models import Prompt, Resource, ResourceTemplate, Server
from hostapp.catalog.naming import own_names
from hostapp.mcp.sanitize import DESCRIPTION_CAP, clean_text

from .agent_view import AgentInfo

logger = logging.getLogger(__name__)

SCHEME = "patchbay://"
UI_SCHEME = "ui://"


def agent_uri(agent: AgentInfo, server: str, uri: str) -> str:
    """`uri` of `server` as `agent` is given it (see the module's doc)."""
    if agent.view.unprefixed_server == server or uri.startswith(UI_SCHEME):
        return uri
    return f"{SCHEME}{server}/{uri}"


def split_uri(uri: str) -> tuple[str, str] | None:
    """(server, the server's URI) of a prefixed URI; None for any other."""
    if not uri.startswith(SCHEME):
        return None
    server, slash, rest = uri[len(SCHEME) :].partition("/")
    return (server, rest) if slash and server and rest else None


@dataclass(frozen=True)
class PromptEntry:
    row: Prompt  # with its server
    prompt: types.Prompt  # as a prefixed view lists it
    own: types.Prompt  # as a view of its server without the prefix lists it
    digest: str

    @property
    def server(self) -> str:
        return self.row.server.name

    def visible_to(self, agent: AgentInfo) -> bool:
        return agent.view.sees_prompt(self.row)

    def face(self, agent: AgentInfo) -> types.Prompt:
        return self.own if agent.view.unprefixed_server == self.server else self.prompt


@dataclass(frozen=True)
class Offered:
    """One server's resources and templates, with the server's own URIs."""

    server: Server
    resources: list[types.Resource] = field(default_factory=list)
    templates: list[types.ResourceTemplate] = field(default_factory=list)


@dataclass(frozen=True)
class Offers:
    prompts: dict[str, PromptEntry]  # by exposed name, in name order
    own_prompts: dict[str, dict[str, PromptEntry]]  # by server, then own name
    servers: dict[str, Offered]  # by server name, in name order
    # Each URI listed (or named by a tool's UI metadata) unchanged, by the servers that do.
    listed_by: dict[str, tuple[str, ...]]

    # -- prompts -----------------------------------------------------------------------

    def _prompt_names(self, agent: AgentInfo) -> dict[str, PromptEntry]:
        server = agent.view.unprefixed_server
        return self.own_prompts.get(server, {}) if server is not None else self.prompts

    def find_prompt(self, agent: AgentInfo, name: str) -> PromptEntry | None:
        entry = self._prompt_names(agent).get(name)
        return entry if entry is not None and entry.visible_to(agent) else None

    def listed_prompts(self, agent: AgentInfo) -> list[types.Prompt]:
        return [e.face(agent) for e in self._prompt_names(agent).values() if e.visible_to(agent)]

    # -- resources ---------------------------------------------------------------------

    def _servers(self, agent: AgentInfo) -> list[Offered]:
        return [o for name, o in self.servers.items() if agent.may_use(name)]

    def listed_resources(self, agent: AgentInfo) -> list[types.Resource]:
        return [
            r.model_copy(update={"uri": agent_uri(agent, o.server.name, r.uri)})
            for o in self._servers(agent)
            for r in o.resources
        ]

    def listed_templates(self, agent: AgentInfo) -> list[types.ResourceTemplate]:
        return [
            t.model_copy(update={"uri_template": agent_uri(agent, o.server.name, t.uri_template)})
            for o in self._servers(agent)
            for t in o.templates
        ]

    def route(self, agent: AgentInfo, uri: str) -> tuple[Server, str]:
        """The server `agent` means by `uri`, and its own URI; LookupError (the message for the
        agent) when it names none in its view, or more than one."""
        own = agent.view.unprefixed_server
        if own is not None:
            offered = self.servers.get(own)
            if offered is None:
                raise LookupError(f"no server offers {uri!r}")
            return offered.server, uri
        split = split_uri(uri)
        if split is not None:
            name, inner = split
            offered = self.servers.get(name)
            if offered is None or not agent.may_use(name):
                raise LookupError(f"no server {name!r} offers resources here")
            return offered.server, inner
        by = [s for s in self.listed_by.get(uri, ()) if agent.may_use(s)]
        if len(by) == 1:
            return self.servers[by[0]].server, uri
        if not by:
            raise LookupError(f"unknown resource {uri!r}: resources here are named {SCHEME}<server>/<uri>")
        raise LookupError(f"{uri!r} is offered by {', '.join(by)}: name one, as {SCHEME}<server>/{uri}")

    def route_template(self, agent: AgentInfo, uri_template: str) -> tuple[Server, str]:
        """The server and its own URI template of a template `agent` names (as it was listed)."""
        own = agent.view.unprefixed_server
        split = split_uri(uri_template) if own is None else (own, uri_template)
        if split is None:  # a `ui://` template, listed unchanged
            split = next(
                (
                    (o.server.name, uri_template)
                    for o in self._servers(agent)
                    if any(t.uri_template == uri_template for t in o.templates)
                ),
                None,
            )
        offered = self.servers.get(split[0]) if split is not None else None
        if split is None or offered is None or not agent.may_use(split[0]):
            raise LookupError(f"unknown resource template {uri_template!r}")
        if not any(t.uri_template == split[1] for t in offered.templates):
            raise LookupError(f"unknown resource template {uri_template!r}")
        return offered.server, split[1]

    def fingerprints(self, agent: AgentInfo) -> tuple[int, int]:
        """What `agent` is listed of prompts, and of resources and templates."""
        prompts = hash(tuple((n, e.digest) for n, e in self._prompt_names(agent).items() if e.visible_to(agent)))
        listed = [r.model_dump_json() for r in self.listed_resources(agent)]
        listed += [t.model_dump_json() for t in self.listed_templates(agent)]
        resources = hash(tuple(listed))
        return prompts, resources


def _prompt(row: Prompt, name: str) -> types.Prompt | None:
    arguments = []
    for a in row.arguments:
        if not isinstance(a.get("name"), str) or not a["name"]:
            continue
        arguments.append(
            types.PromptArgument(
                name=a["name"],
                title=clean_text(str(a.get("title") or ""), 200) or None,
                description=clean_text(str(a.get("description") or ""), DESCRIPTION_CAP) or None,
                required=a.get("required") is True,
            )
        )
    try:
        return types.Prompt(
            name=name, title=row.title or None, description=row.description or None, arguments=arguments or None
        )
    except ValidationError:
        logger.warning("the prompt %s cannot be given to agents: its definition does not validate", row.exposed_name)
        return None


def _offer(model: type[Any], definition: dict[str, Any], fields: dict[str, Any]) -> Any:
    """A resource or template as listed: the server's definition, with the host's texts."""
    try:
        return model.model_validate(definition | fields)
    except ValidationError:
        return None


def load_offers(ui_uris: dict[str, set[str]]) -> Offers:
    """The active prompts and templates, and the listed resources, of enabled servers.
    `ui_uris`: the `ui://` URIs each server's tools name in their UI metadata."""
    servers = {s.name: s for s in Server.objects.filter(enabled=True).order_by("name")}
    rows = list(Prompt.objects.filter(status=Prompt.ACTIVE, server__enabled=True).select_related("server"))
    rows.sort(key=lambda p: p.exposed_name)
    prompts: dict[str, PromptEntry] = {}
    own_prompts: dict[str, dict[str, PromptEntry]] = defaultdict(dict)
    by_server: dict[str, list[Prompt]] = defaultdict(list)
    for p in rows:
        by_server[p.server.name].append(p)
    for server_name, members in by_server.items():
        plain = own_names(p.original_name for p in members)
        for p in members:
            listed = _prompt(p, p.exposed_name)
            if listed is None:
                continue
            digest = hashlib.sha256(listed.model_dump_json(exclude={"name"}).encode()).hexdigest()
            entry = PromptEntry(p, listed, listed.model_copy(update={"name": plain[p.original_name].name}), digest)
            prompts[p.exposed_name] = entry
            own_prompts[server_name][entry.own.name] = entry
    resources: dict[str, list[types.Resource]] = defaultdict(list)
    listed_by: dict[str, list[str]] = defaultdict(list)
    for r in Resource.objects.filter(server__enabled=True).select_related("server").order_by("server__name", "uri"):
        resource = _offer(
            types.Resource, r.definition, {"uri": r.uri, "title": r.title or None, "description": r.description or None}
        )
        if resource is not None:
            resources[r.server.name].append(resource)
            listed_by[r.uri].append(r.server.name)
    for server_name, uris in ui_uris.items():
        for uri in uris:
            if server_name not in listed_by[uri]:
                listed_by[uri].append(server_name)
    templates: dict[str, list[types.ResourceTemplate]] = defaultdict(list)
    for t in (
        ResourceTemplate.objects.filter(status=ResourceTemplate.ACTIVE, server__enabled=True)
        .select_related("server")
        .order_by("server__name", "uri_template")
    ):
        fields = {"uriTemplate": t.uri_template, "title": t.title or None, "description": t.description or None}
        template = _offer(types.ResourceTemplate, t.definition, fields)
        if template is not None:
            templates[t.server.name].append(template)
    offered = {
        name: Offered(server, resources.get(name, []), templates.get(name, [])) for name, server in servers.items()
    }
    return Offers(
        prompts=prompts,
        own_prompts=dict(own_prompts),
        servers=offered,
        listed_by={uri: tuple(sorted(by)) for uri, by in listed_by.items()},
    )


EMPTY_OFFERS = Offers({}, {}, {}, {})


def agent_content(agent: AgentInfo, server: str, items: Any) -> Any:
    """Content items of a result (a tool's, a prompt's messages' or a read's contents) with
    the URIs they carry as `agent` names them: an embedded resource's and a resource link's."""
    if not isinstance(items, list):
        return items
    out = []
    for item in items:
        if isinstance(item, dict):
            if isinstance(item.get("uri"), str):
                item = {**item, "uri": agent_uri(agent, server, item["uri"])}
            inner = item.get("resource")
            if isinstance(inner, dict) and isinstance(inner.get("uri"), str):
                item = {**item, "resource": {**inner, "uri": agent_uri(agent, server, inner["uri"])}}
            content = item.get("content")  # a prompt message's
            if isinstance(content, dict):
                item = {**item, "content": agent_content(agent, server, [content])[0]}
        out.append(item)
    return out
