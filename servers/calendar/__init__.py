"""The calendar server: events in a local SQLite file (list, create, cancel)."""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from servers._common import READ, Store, destructive, new_server, next_id, write
from servers._common import idempotency_key as key_for_call
from servers._common import main as run_main

EventStatus = Literal["confirmed", "cancelled"]
_ADDRESS = re.compile(r"^[^@\s,;<>]+@[^@\s,;<>]+\.[^@\s,;<>]+$")
_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
MAX_DURATION = timedelta(days=14)

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    start TEXT NOT NULL,
    "end" TEXT NOT NULL,
    start_ts REAL NOT NULL,
    end_ts REAL NOT NULL,
    location TEXT NOT NULL DEFAULT '',
    attendees TEXT NOT NULL DEFAULT '[]',
    status TEXT NOT NULL CHECK (status IN ('confirmed', 'cancelled'))
);
CREATE INDEX IF NOT EXISTS events_start ON events (start_ts);
"""


class Event(BaseModel):
    id: str = Field(description="Event id, e.g. evt-0001")
    title: str
    start: str = Field(description="ISO 8601 start, with UTC offset")
    end: str = Field(description="ISO 8601 end, with UTC offset")
    location: str
    attendees: list[str] = Field(description="Attendee email addresses")
    status: EventStatus


class EventList(BaseModel):
    start: str | None = Field(description="Start of the range searched, or null for unbounded")
    end: str | None = Field(description="End of the range searched, or null for unbounded")
    total: int
    events: list[Event] = Field(description="Events overlapping the range, in start order")


class CancelResult(BaseModel):
    event: Event
    already_cancelled: bool = Field(description="True when the event was already cancelled (nothing changed)")


SEED: list[tuple[str, str, str, str, list[str]]] = [
    (
        "Weekly team sync",
        "2026-05-04T09:30:00+02:00",
        "2026-05-04T10:00:00+02:00",
        "Video call",
        ["priya.nair@patchbay.example", "dana.okafor@northwind.example"],
    ),
    (
        "Q3 budget review",
        "2026-05-07T14:00:00+02:00",
        "2026-05-07T15:30:00+02:00",
        "Birch room",
        ["dana.okafor@northwind.example"],
    ),
    ("Lunch with Priya", "2026-05-08T12:30:00+02:00", "2026-05-08T13:30:00+02:00", "Keizersgracht", []),
    (
        "Customs call re shipment 88213",
        "2026-05-05T11:00:00+02:00",
        "2026-05-05T11:30:00+02:00",
        "Phone",
        ["marco.rossi@acme-logistics.example"],
    ),
]


def _parse(value: str, name: str) -> datetime:
    """Parse an ISO 8601 date-time; a time without an offset is taken as UTC."""
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ToolError(
            f"Invalid {name} {value!r}: use an ISO 8601 date-time such as 2026-05-06T14:00:00+02:00."
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _parse_bound(value: str | None, name: str, *, end: bool) -> datetime | None:
    """A range bound: a date-time, or a date (a date as `end` includes that whole day)."""
    if value is None or not value.strip():
        return None
    if _DATE_ONLY.match(value.strip()):
        try:
            day = date.fromisoformat(value.strip())
        except ValueError:
            raise ToolError(f"Invalid {name} date {value!r}: use YYYY-MM-DD.") from None
        moment = datetime(day.year, day.month, day.day, tzinfo=UTC)
        return moment + timedelta(days=1) if end else moment
    return _parse(value, name)


def _addresses(attendees: list[str]) -> list[str]:
    cleaned = [address.strip() for address in attendees if address.strip()]
    bad = [address for address in cleaned if not _ADDRESS.match(address)]
    if bad:
        raise ToolError(f"Not a valid attendee email address: {', '.join(repr(b) for b in bad)}.")
    return list(dict.fromkeys(cleaned))


def _insert(
    conn: sqlite3.Connection, title: str, start: datetime, end: datetime, location: str, attendees: list[str]
) -> Event:
    event = Event(
        id=next_id(conn, "evt"),
        title=title,
        start=start.isoformat(),
        end=end.isoformat(),
        location=location,
        attendees=attendees,
        status="confirmed",
    )
    conn.execute(
        'INSERT INTO events (id, title, start, "end", start_ts, end_ts, location, attendees, status) '
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'confirmed')",
        (event.id, title, event.start, event.end, start.timestamp(), end.timestamp(), location, json.dumps(attendees)),
    )
    return event


def _seed(conn: sqlite3.Connection) -> None:
    for title, start, end, location, attendees in sorted(SEED, key=lambda row: row[1]):
        _insert(conn, title, datetime.fromisoformat(start), datetime.fromisoformat(end), location, attendees)


def _event(row: sqlite3.Row) -> Event:
    return Event(
        id=row["id"],
        title=row["title"],
        start=row["start"],
        end=row["end"],
        location=row["location"],
        attendees=json.loads(row["attendees"]),
        status=row["status"],
    )


def _get(conn: sqlite3.Connection, event_id: str) -> sqlite3.Row:
    row = conn.execute("SELECT * FROM events WHERE id = ?", (event_id,)).fetchone()
    if row is None:
        raise ToolError(f"No event with id {event_id!r}. Use list to find event ids.")
    return row


DEFAULT_PORT = 8103


def open_store(data_dir: Path) -> Store:
    """The server's SQLite store in `data_dir`, created and seeded on first use."""
    return Store(data_dir / "calendar.sqlite3", SCHEMA, _seed)


def build(data_dir: Path, log_level: str = "WARNING") -> MCPServer:
    store = open_store(data_dir)
    server = new_server(
        "calendar",
        title="Calendar",
        instructions=(
            "A local calendar. List events in a date range, create events with ISO 8601 start and end times, "
            "or cancel an event. Times without a UTC offset are taken as UTC."
        ),
        log_level=log_level,
    )

    @server.tool(
        name="list",
        title="List events",
        description=(
            "List events overlapping a range, in start order. start and end are ISO 8601 date-times or dates "
            "(a date as end includes that whole day); omit either for an open range. Cancelled events are "
            "left out unless include_cancelled is true."
        ),
        annotations=READ,
    )
    def list_events(
        start: Annotated[str | None, Field(description="Range start, e.g. 2026-05-04 or 2026-05-04T09:00:00Z")] = None,
        end: Annotated[str | None, Field(description="Range end, e.g. 2026-05-10")] = None,
        include_cancelled: Annotated[bool, Field(description="Also list cancelled events")] = False,
    ) -> EventList:
        range_start = _parse_bound(start, "start", end=False)
        range_end = _parse_bound(end, "end", end=True)
        if range_start is not None and range_end is not None and range_end <= range_start:
            raise ToolError(f"The range end ({end}) must be after its start ({start}).")
        clauses: list[str] = []
        params: list[object] = []
        if range_start is not None:
            clauses.append("end_ts > ?")
            params.append(range_start.timestamp())
        if range_end is not None:
            clauses.append("start_ts < ?")
            params.append(range_end.timestamp())
        if not include_cancelled:
            clauses.append("status = 'confirmed'")
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        with store.read() as conn:
            rows = conn.execute(f"SELECT * FROM events{where} ORDER BY start_ts, id", params).fetchall()
        return EventList(
            start=range_start.isoformat() if range_start else None,
            end=range_end.isoformat() if range_end else None,
            total=len(rows),
            events=[_event(row) for row in rows],
        )

    @server.tool(
        name="create",
        title="Create event",
        description=(
            "Create a confirmed event from ISO 8601 start and end date-times (end after start, at most 14 days "
            "long), with optional attendees and location. Each call creates one more event; pass "
            "_meta['dev.patchbay/idempotencyKey'] to make a retry safe."
        ),
        annotations=write(idempotent=False),
    )
    def create(
        title: Annotated[str, Field(description="Event title", min_length=1, max_length=300)],
        start: Annotated[str, Field(description="Start, e.g. 2026-05-06T14:00:00+02:00")],
        end: Annotated[str, Field(description="End, e.g. 2026-05-06T15:00:00+02:00")],
        ctx: Context,
        attendees: Annotated[list[str], Field(description="Attendee email addresses", max_length=100)] = [],  # noqa: B006
        location: Annotated[str, Field(description="Where it happens", max_length=300)] = "",
    ) -> Event:
        if not title.strip():
            raise ToolError("The event title must not be blank.")
        start_at = _parse(start, "start")
        end_at = _parse(end, "end")
        if end_at <= start_at:
            raise ToolError(f"The event end ({end}) must be after its start ({start}).")
        if end_at - start_at > MAX_DURATION:
            raise ToolError("An event may last at most 14 days.")
        people = _addresses(attendees)

        return store.write(
            tool="create",
            arguments={
                "title": title.strip(),
                "start": start_at.isoformat(),
                "end": end_at.isoformat(),
                "attendees": people,
                "location": location.strip(),
            },
            key=key_for_call(ctx),
            result_type=Event,
            effect=lambda conn: _insert(conn, title.strip(), start_at, end_at, location.strip(), people),
        )

    @server.tool(
        name="cancel",
        title="Cancel event",
        description=(
            "Cancel an event (attendees would be told it is off). Cancelling a cancelled event changes nothing. "
            "Honours an idempotency key in _meta['dev.patchbay/idempotencyKey']."
        ),
        annotations=destructive(idempotent=True),
    )
    def cancel(event_id: Annotated[str, Field(description="Event id, e.g. evt-0001")], ctx: Context) -> CancelResult:
        def effect(conn: sqlite3.Connection) -> CancelResult:
            row = _get(conn, event_id)
            if row["status"] == "cancelled":
                return CancelResult(event=_event(row), already_cancelled=True)
            conn.execute("UPDATE events SET status = 'cancelled' WHERE id = ?", (event_id,))
            return CancelResult(event=_event(_get(conn, event_id)), already_cancelled=False)

        return store.write(
            tool="cancel",
            arguments={"event_id": event_id},
            key=key_for_call(ctx),
            result_type=CancelResult,
            effect=effect,
        )

    return server


def main(argv: list[str] | None = None) -> None:
    run_main("servers.calendar", build, argv, default_port=DEFAULT_PORT)
