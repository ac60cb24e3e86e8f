"""The mailbox server: search, read, archive, send and delete messages in a local SQLite mailbox.

Sending is simulated: a sent message is stored in the `sent` folder and goes nowhere else.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from servers._common import READ, Store, destructive, new_server, next_id, now_iso, write
from servers._common import idempotency_key as key_for_call
from servers._common import main as run_main

Folder = Literal["inbox", "archive", "sent"]
OWNER = "you@patchbay.example"
SNIPPET_LENGTH = 120
_ADDRESS = re.compile(r"^[^@\s,;<>]+@[^@\s,;<>]+\.[^@\s,;<>]+$")

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id TEXT PRIMARY KEY,
    folder TEXT NOT NULL CHECK (folder IN ('inbox', 'archive', 'sent')),
    sender TEXT NOT NULL,
    recipients TEXT NOT NULL,
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    date TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_folder_date ON messages (folder, date);
"""


class MessageSummary(BaseModel):
    id: str = Field(description="Message id, e.g. msg-0001")
    folder: Folder
    sender: str = Field(description="From address")
    recipients: list[str] = Field(description="To addresses")
    subject: str
    date: str = Field(description="ISO 8601 timestamp")
    snippet: str = Field(description="The start of the body")


class Message(BaseModel):
    id: str = Field(description="Message id, e.g. msg-0001")
    folder: Folder
    sender: str = Field(description="From address")
    recipients: list[str] = Field(description="To addresses")
    subject: str
    body: str
    date: str = Field(description="ISO 8601 timestamp")


class SearchResult(BaseModel):
    query: str
    folder: Folder | None = Field(description="The folder searched, or null for all folders")
    total: int = Field(description="How many messages match (may exceed the number returned)")
    messages: list[MessageSummary] = Field(description="Matches, newest first")


class ArchiveResult(BaseModel):
    id: str
    previous_folder: Folder
    folder: Folder
    already_archived: bool = Field(description="True when the message was already in the archive (nothing moved)")


class DeleteResult(BaseModel):
    id: str
    deleted: bool
    subject: str = Field(description="Subject of the deleted message")


SEED: list[tuple[str, str, list[str], str, str, str]] = [
    (
        "inbox",
        "dana.okafor@northwind.example",
        [OWNER],
        "Q3 budget review moved to Thursday",
        "Hi,\n\nThe Q3 budget review is moving from Tuesday to Thursday at 14:00 in the Birch room. "
        "Please bring the updated headcount numbers.\n\nThanks,\nDana",
        "2026-05-04T08:12:00+00:00",
    ),
    (
        "inbox",
        "billing@cloudhost.example",
        [OWNER],
        "Your invoice INV-20417 is ready",
        "Your invoice INV-20417 for April 2026 (EUR 412.80) is ready. Payment is due on 2026-05-20.\n\n"
        "This is an automated message.",
        "2026-05-04T06:30:00+00:00",
    ),
    (
        "inbox",
        "marco.rossi@acme-logistics.example",
        [OWNER, "dana.okafor@northwind.example"],
        "Shipment 88213 delayed at customs",
        "Hello,\n\nShipment 88213 is held at customs pending a corrected commercial invoice. "
        "Could you send the revised invoice by Wednesday? Delivery slips to next Monday otherwise.\n\n"
        "Best regards,\nMarco",
        "2026-05-03T16:45:00+00:00",
    ),
    (
        "inbox",
        "priya.nair@patchbay.example",
        [OWNER],
        "Lunch on Friday?",
        "Are you free for lunch on Friday? The new ramen place on Keizersgracht opened last week.\n\nPriya",
        "2026-05-03T11:02:00+00:00",
    ),
    (
        "inbox",
        "security@patchbay.example",
        [OWNER],
        "Action required: rotate your API token",
        "Your personal API token expires on 2026-05-15. Rotate it from Settings > Tokens before then "
        "to avoid interrupted integrations.",
        "2026-05-02T09:00:00+00:00",
    ),
    (
        "archive",
        "newsletter@devweekly.example",
        [OWNER],
        "Dev Weekly #212: SQLite in production",
        "This week: running SQLite in production with WAL mode, backups with litestream, and more.",
        "2026-04-28T07:00:00+00:00",
    ),
    (
        "sent",
        OWNER,
        ["marco.rossi@acme-logistics.example"],
        "Re: Shipment 88213 schedule",
        "Hi Marco,\n\nThanks for the update on the schedule. Let me know if customs needs anything from us.\n\nRegards",
        "2026-05-01T15:20:00+00:00",
    ),
]


def _seed(conn: sqlite3.Connection) -> None:
    for folder, sender, recipients, subject, body, date in SEED:
        conn.execute(
            "INSERT INTO messages (id, folder, sender, recipients, subject, body, date) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (next_id(conn, "msg"), folder, sender, json.dumps(recipients), subject, body, date),
        )


def _message(row: sqlite3.Row) -> Message:
    return Message(
        id=row["id"],
        folder=row["folder"],
        sender=row["sender"],
        recipients=json.loads(row["recipients"]),
        subject=row["subject"],
        body=row["body"],
        date=row["date"],
    )


def _summary(row: sqlite3.Row) -> MessageSummary:
    body = " ".join(row["body"].split())
    snippet = body if len(body) <= SNIPPET_LENGTH else body[: SNIPPET_LENGTH - 1].rstrip() + "…"
    return MessageSummary(
        id=row["id"],
        folder=row["folder"],
        sender=row["sender"],
        recipients=json.loads(row["recipients"]),
        subject=row["subject"],
        date=row["date"],
        snippet=snippet,
    )


def _get(conn: sqlite3.Connection, message_id: str) -> sqlite3.Row:
    row = conn.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
    if row is None:
        raise ToolError(f"No message with id {message_id!r}. Use search to find message ids.")
    return row


def _addresses(to: str) -> list[str]:
    addresses = [part.strip() for part in re.split(r"[,;]", to) if part.strip()]
    if not addresses:
        raise ToolError("'to' needs at least one recipient address.")
    bad = [address for address in addresses if not _ADDRESS.match(address)]
    if bad:
        raise ToolError(f"Not a valid email address: {', '.join(repr(b) for b in bad)}.")
    return addresses


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


DEFAULT_PORT = 8101


def open_store(data_dir: Path) -> Store:
    """The server's SQLite store in `data_dir`, created and seeded on first use."""
    return Store(data_dir / "mailbox.sqlite3", SCHEMA, _seed)


def build(data_dir: Path, log_level: str = "WARNING") -> MCPServer:
    store = open_store(data_dir)
    server = new_server(
        "mailbox",
        title="Mailbox",
        instructions=(
            "A local mailbox with inbox, archive and sent folders. Find messages with search, open one with "
            "read, then archive, delete or reply with send. Sending is simulated: the message is only stored "
            "in the sent folder."
        ),
        log_level=log_level,
    )

    @server.tool(
        name="search",
        title="Search messages",
        description=(
            "Search messages whose subject, body, sender or recipients contain the query (case-insensitive). "
            "An empty query matches every message. Returns summaries, newest first; use read for the full body."
        ),
        annotations=READ,
    )
    def search(
        query: Annotated[str, Field(description="Text to look for; empty matches all", max_length=200)] = "",
        folder: Annotated[Folder | None, Field(description="Limit to one folder; omit for all folders")] = None,
        limit: Annotated[int, Field(description="Maximum number of messages to return", ge=1, le=50)] = 10,
    ) -> SearchResult:
        pattern = f"%{_escape_like(query.strip())}%"
        where = (
            "(subject LIKE :p ESCAPE '\\' OR body LIKE :p ESCAPE '\\' OR sender LIKE :p ESCAPE '\\' "
            "OR recipients LIKE :p ESCAPE '\\')"
        )
        params: dict[str, object] = {"p": pattern, "limit": limit}
        if folder is not None:
            where += " AND folder = :folder"
            params["folder"] = folder
        with store.read() as conn:
            total = conn.execute(f"SELECT COUNT(*) FROM messages WHERE {where}", params).fetchone()[0]
            rows = conn.execute(
                f"SELECT * FROM messages WHERE {where} ORDER BY date DESC, id DESC LIMIT :limit", params
            ).fetchall()
        return SearchResult(query=query, folder=folder, total=total, messages=[_summary(row) for row in rows])

    @server.tool(
        name="read",
        title="Read message",
        description="Return one message in full (sender, recipients, subject, body, date, folder) by its id.",
        annotations=READ,
    )
    def read(message_id: Annotated[str, Field(description="Message id, e.g. msg-0001")]) -> Message:
        with store.read() as conn:
            return _message(_get(conn, message_id))

    @server.tool(
        name="archive",
        title="Archive message",
        description=(
            "Move a message to the archive folder. Archiving an archived message changes nothing. "
            "Honours an idempotency key in _meta['dev.patchbay/idempotencyKey']."
        ),
        annotations=write(idempotent=True),
    )
    def archive(
        message_id: Annotated[str, Field(description="Message id, e.g. msg-0001")], ctx: Context
    ) -> ArchiveResult:
        def effect(conn: sqlite3.Connection) -> ArchiveResult:
            row = _get(conn, message_id)
            conn.execute("UPDATE messages SET folder = 'archive' WHERE id = ?", (message_id,))
            return ArchiveResult(
                id=message_id,
                previous_folder=row["folder"],
                folder="archive",
                already_archived=row["folder"] == "archive",
            )

        return store.write(
            tool="archive",
            arguments={"message_id": message_id},
            key=key_for_call(ctx),
            result_type=ArchiveResult,
            effect=effect,
        )

    @server.tool(
        name="send",
        title="Send message",
        description=(
            "Send a new message (simulated: it is stored in the sent folder). Each call sends one more message, "
            "so pass an idempotency key - the idempotency_key argument or _meta['dev.patchbay/idempotencyKey'] - "
            "to make a retry safe: a repeated key returns the first result and sends nothing."
        ),
        annotations=destructive(idempotent=False),
    )
    def send(
        to: Annotated[str, Field(description="Recipient address; separate several with commas", max_length=2000)],
        subject: Annotated[str, Field(description="Subject line", min_length=1, max_length=300)],
        body: Annotated[str, Field(description="Plain-text body", max_length=100_000)],
        ctx: Context,
        idempotency_key: Annotated[
            str | None,
            Field(
                description="Optional key making this send idempotent; same as _meta['dev.patchbay/idempotencyKey']",
                max_length=255,
            ),
        ] = None,
    ) -> Message:
        recipients = _addresses(to)
        if not subject.strip():
            raise ToolError("The subject must not be blank.")

        def effect(conn: sqlite3.Connection) -> Message:
            message = Message(
                id=next_id(conn, "msg"),
                folder="sent",
                sender=OWNER,
                recipients=recipients,
                subject=subject,
                body=body,
                date=now_iso(),
            )
            conn.execute(
                "INSERT INTO messages (id, folder, sender, recipients, subject, body, date) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (message.id, message.folder, message.sender, json.dumps(recipients), subject, body, message.date),
            )
            return message

        return store.write(
            tool="send",
            arguments={"to": recipients, "subject": subject, "body": body},
            key=key_for_call(ctx, idempotency_key),
            result_type=Message,
            effect=effect,
        )

    @server.tool(
        name="delete",
        title="Delete message",
        description=(
            "Permanently delete a message (from any folder); it cannot be recovered. "
            "Honours an idempotency key in _meta['dev.patchbay/idempotencyKey']."
        ),
        annotations=destructive(idempotent=True),
    )
    def delete(
        message_id: Annotated[str, Field(description="Message id, e.g. msg-0001")], ctx: Context
    ) -> DeleteResult:
        def effect(conn: sqlite3.Connection) -> DeleteResult:
            row = _get(conn, message_id)
            conn.execute("DELETE FROM messages WHERE id = ?", (message_id,))
            return DeleteResult(id=message_id, deleted=True, subject=row["subject"])

        return store.write(
            tool="delete",
            arguments={"message_id": message_id},
            key=key_for_call(ctx),
            result_type=DeleteResult,
            effect=effect,
        )

    return server


def main(argv: list[str] | None = None) -> None:
    run_main("servers.mailbox", build, argv, default_port=DEFAULT_PORT)
