"""The live websocket: pages subscribe and re-render a fragment on each event.

Approvers may also decide pending calls over it (`{"action": "approve"|"deny", ...}`),
checked against the same permission as the pages.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from hostapp.calls import actions
from hostapp.calls.models import Call
from hostapp.core.events import LIVE_GROUP


class LiveConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        await self.channel_layer.group_add(LIVE_GROUP, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(LIVE_GROUP, self.channel_name)

    async def live_events(self, message: dict[str, Any]) -> None:
        """A batch from one process's event sender: each event is its own frame."""
        for event in message.get("events", ()):
            await self.send_json({"type": event["kind"], "data": event.get("data", {})})

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        action = content.get("action") if isinstance(content, dict) else None
        if action not in ("approve", "deny"):
            await self.send_json({"type": "error", "data": {"message": "unknown action"}})
            return
        reply = await self._decide(action, content)
        await self.send_json(reply)

    @database_sync_to_async
    def _decide(self, action: str, content: dict[str, Any]) -> dict[str, Any]:
        user = self.scope["user"]
        if not user.has_perm("calls.approve_call"):
            return {"type": "error", "data": {"message": "you do not have the approve permission"}}
        try:
            call_id = int(content["call_id"])
        except (KeyError, TypeError, ValueError):
            return {"type": "error", "data": {"message": "call_id must be a number"}}
        try:
            if action == "approve":
                call = actions.approve(call_id, user, always_allow=content.get("always") is True)
            else:
                call = actions.deny(call_id, user, str(content.get("reason") or ""))
        except Call.DoesNotExist:
            return {"type": "error", "data": {"message": f"no call #{call_id}"}}
        except actions.ApprovalError as exc:
            return {"type": "error", "data": {"message": str(exc)}}
        return {"type": "decided", "data": {"call_id": call.pk, "status": call.status}}
