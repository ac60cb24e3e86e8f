"""What a server offers besides tools, merged into the catalog at each refresh: its prompts
and resource templates (pinned and quarantined as tools are) and its resources (listed,
read on demand, never stored).

A prompt is exposed as `<server>__<prompt>` by the rules tool names follow
(hostapp/catalog/naming.py). A new prompt or template of a trusted server is accepted as
listed; of an untrusted one it waits for a review. One that changes since it was accepted
waits for a review too, and one that changes back to what was accepted needs none.
Texts are cleaned of controls and capped as tool descriptions are.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from hostapp.core.events import send_event_on_commit
from hostapp.core.jsonvalues import storable
from hostapp.mcp.sanitize import DESCRIPTION_CAP, TITLE_CAP, clean_text

from .models import (
    PROMPT_PINNED_KEYS,
    TEMPLATE_PINNED_KEYS,
    Offer,
    Prompt,
    Resource,
    ResourceTemplate,
    Server,
    offer_hash,
)
from .naming import expose_names

logger = logging.getLogger(__name__)

# A URI or URI template is kept when its UTF-8 form is at most this long: the columns hold
# 2000 characters, and a unique index entry on PostgreSQL holds about 2700 bytes.
MAX_URI = 2000


@dataclass
class OffersResult:
    prompts: int = 0
    templates: int = 0
    resources: int = 0
    quarantined: list[str] = field(default_factory=list)
    changed: bool = False


def _texts(definition: dict[str, Any]) -> dict[str, str]:
    return {
        "title": clean_text(str(definition.get("title") or ""), TITLE_CAP),
        "description": clean_text(str(definition.get("description") or ""), DESCRIPTION_CAP),
    }


def _merge(
    server: Server,
    model: type[Offer],
    key: str,
    listed: dict[str, dict[str, Any]],
    pinned_keys: tuple[str, ...],
    extra: Any,
    result: OffersResult,
) -> None:
    """Merge one kind of offer (`listed`, by its key), as the module's doc says."""
    now = timezone.now()
    current = {getattr(o, key): o for o in model.objects.select_for_update().filter(server=server)}  # type: ignore[attr-defined]
    gone = [o.pk for k, o in current.items() if k not in listed]
    if gone:
        model.objects.filter(pk__in=gone).delete()  # type: ignore[attr-defined]
        result.changed = True
    for name, raw in listed.items():
        definition = storable(raw)
        digest = offer_hash(definition, pinned_keys)
        offer = current.get(name)
        if offer is None:
            trusted = server.trusted
            model.objects.create(  # type: ignore[attr-defined]
                server=server,
                **{key: name},
                **extra(name, definition),
                definition=definition,
                definition_hash=digest,
                pinned_definition=definition if trusted else None,
                pinned_hash=digest if trusted else "",
                status=Offer.ACTIVE if trusted else Offer.QUARANTINED,
                quarantine_reason="" if trusted else Offer.NEW,
                **_texts(definition),
            )
            result.changed = True
            if not trusted:
                result.quarantined.append(name)
            continue
        if digest == offer.definition_hash and definition == offer.definition:
            continue
        offer.definition = definition
        for attr, value in {**extra(name, definition), **_texts(definition)}.items():
            setattr(offer, attr, value)
        if digest != offer.definition_hash:
            offer.definition_hash, offer.changed_at = digest, now
            if offer.pinned_hash and digest != offer.pinned_hash:
                offer.status, offer.quarantine_reason = Offer.QUARANTINED, Offer.CHANGED
                result.quarantined.append(name)
            elif offer.pinned_hash:
                offer.status, offer.quarantine_reason = Offer.ACTIVE, ""
            result.changed = True
        offer.save()


def _first_by(items: Iterable[Any], key: str) -> dict[str, dict[str, Any]]:
    """The listed items by `key` (a string of at most MAX_URI bytes); the first of duplicates."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        value = item.get(key) if isinstance(item, dict) else None
        if isinstance(value, str) and value and len(value.encode()) <= MAX_URI and value not in out:
            out[value] = item
    return out


def record_offers(server: Server, offered: dict[str, list[dict[str, Any]]]) -> OffersResult:
    """Merge a complete listing of the server's prompts, resource templates and resources."""
    result = OffersResult()
    prompts = _first_by(offered.get("prompts", ()), "name")
    templates = _first_by(offered.get("resource_templates", ()), "uriTemplate")
    resources = _first_by(offered.get("resources", ()), "uri")
    exposed = expose_names(server.name, prompts)
    with transaction.atomic():
        _merge(
            server,
            Prompt,
            "original_name",
            prompts,
            PROMPT_PINNED_KEYS,
            lambda name, d: {"exposed_name": exposed[name].name},
            result,
        )
        _merge(
            server,
            ResourceTemplate,
            "uri_template",
            templates,
            TEMPLATE_PINNED_KEYS,
            lambda name, d: {
                "name": clean_text(str(d.get("name") or ""), 512),
                "mime_type": clean_text(str(d.get("mimeType") or ""), 200),
            },
            result,
        )
        result.changed |= _replace_resources(server, resources)
        result.prompts, result.templates, result.resources = len(prompts), len(templates), len(resources)
        if result.changed:
            send_event_on_commit("catalog.changed", {"server": server.name, "offers": True})
    return result


def _replace_resources(server: Server, listed: dict[str, dict[str, Any]]) -> bool:
    current = {r.uri: r for r in Resource.objects.select_for_update().filter(server=server)}
    changed = False
    gone = [r.pk for uri, r in current.items() if uri not in listed]
    if gone:
        Resource.objects.filter(pk__in=gone).delete()
        changed = True
    for uri, raw in listed.items():
        definition = storable(raw)
        size = definition.get("size")
        fields = {
            "name": clean_text(str(definition.get("name") or ""), 512),
            "mime_type": clean_text(str(definition.get("mimeType") or ""), 200),
            "size": size if isinstance(size, int) and not isinstance(size, bool) and 0 <= size < 2**63 else None,
            "definition": definition,
            **_texts(definition),
        }
        resource = current.get(uri)
        if resource is None:
            Resource.objects.create(server=server, uri=uri, **fields)
            changed = True
        elif resource.definition != definition:
            for attr, value in fields.items():
                setattr(resource, attr, value)
            resource.save()
            changed = True
    return changed


def accept_offer(offer: Offer, user: Any) -> None:
    """A person reviewed the prompt's or template's current definition: pin it, make it usable."""
    with transaction.atomic():
        offer.pinned_definition, offer.pinned_hash = offer.definition, offer.definition_hash
        offer.status, offer.quarantine_reason = Offer.ACTIVE, ""
        offer.accepted_at = timezone.now()
        offer.accepted_by = user if getattr(user, "pk", None) else None
        offer.save()
        send_event_on_commit("catalog.changed", {"server": offer.server.name, "offers": True})  # type: ignore[attr-defined]
