"""The tasks server: a to-do list in a local SQLite file (list, add, complete, delete)."""

from __future__ import annotations

import sqlite3
from datetime import date
from pathlib import Path
from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from servers._common import READ, Store, destructive, new_server, next_id, now_iso, write
from servers._common import idempotency_key as key_for_call
from servers._common import main as run_main

Status = Literal["open", "done"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    notes TEXT NOT NULL DEFAULT '',
    due TEXT,
    status TEXT NOT NULL CHECK (status IN ('open', 'done')),
    created_at TEXT NOT NULL,
    completed_at TEXT
);
"""


class Task(BaseModel):
    id: str = Field(description="Task id, e.g. task-0001")
    title: str
    notes: str
    due: str | None = Field(description="Due date (YYYY-MM-DD), or null")
    status: Status
    created_at: str = Field(description="ISO 8601 timestamp")
    completed_at: str | None = Field(description="ISO 8601 timestamp, or null while open")


class TaskList(BaseModel):
    status: Status | None = Field(description="The status filter applied, or null for all tasks")
    total: int
    tasks: list[Task] = Field(description="Open tasks first, then by due date (undated last)")


class CompleteResult(BaseModel):
    task: Task
    already_done: bool = Field(description="True when the task was already done (nothing changed)")


class DeleteResult(BaseModel):
    id: str
    deleted: bool
    title: str = Field(description="Title of the deleted task")


SEED: list[tuple[str, str, str | None, Status]] = [
    ("Send revised commercial invoice for shipment 88213", "Marco needs it by Wednesday.", "2026-05-06", "open"),
    ("Prepare headcount numbers for Q3 budget review", "", "2026-05-07", "open"),
    ("Rotate personal API token", "Settings > Tokens", "2026-05-15", "open"),
    ("Book dentist appointment", "", None, "open"),
    ("Submit April expense report", "", "2026-04-30", "done"),
]
SEED_CREATED_AT = "2026-04-27T09:00:00+00:00"


def _seed(conn: sqlite3.Connection) -> None:
    for title, notes, due, status in SEED:
        conn.execute(
            "INSERT INTO tasks (id, title, notes, due, status, created_at, completed_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                next_id(conn, "task"),
                title,
                notes,
                due,
                status,
                SEED_CREATED_AT,
                "2026-04-30T17:00:00+00:00" if status == "done" else None,
            ),
        )


def _task(row: sqlite3.Row) -> Task:
    return Task(
        id=row["id"],
        title=row["title"],
        notes=row["notes"],
        due=row["due"],
        status=row["status"],
        created_at=row["created_at"],
        completed_at=row["completed_at"],
    )


def _get(conn: sqlite3.Connection, task_id: str) -> sqlite3.Row:
    row = conn.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
    if row is None:
        raise ToolError(f"No task with id {task_id!r}. Use list to find task ids.")
    return row


def _due_date(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    try:
        return date.fromisoformat(value.strip()).isoformat()
    except ValueError:
        raise ToolError(f"Invalid due date {value!r}: use YYYY-MM-DD, e.g. 2026-05-20.") from None


DEFAULT_PORT = 8102


def open_store(data_dir: Path) -> Store:
    """The server's SQLite store in `data_dir`, created and seeded on first use."""
    return Store(data_dir / "tasks.sqlite3", SCHEMA, _seed)


def build(data_dir: Path, log_level: str = "WARNING") -> MCPServer:
    store = open_store(data_dir)
    server = new_server(
        "tasks",
        title="Tasks",
        instructions="A local to-do list. List tasks, add new ones, mark them complete, or delete them.",
        log_level=log_level,
    )

    @server.tool(
        name="list",
        title="List tasks",
        description="List tasks, optionally only open or only done ones. Open tasks come first, soonest due first.",
        annotations=READ,
    )
    def list_tasks(
        status: Annotated[Status | None, Field(description="'open' or 'done'; omit for all tasks")] = None,
    ) -> TaskList:
        query = "SELECT * FROM tasks"
        params: tuple[str, ...] = ()
        if status is not None:
            query += " WHERE status = ?"
            params = (status,)
        query += " ORDER BY status = 'done', due IS NULL, due, id"
        with store.read() as conn:
            rows = conn.execute(query, params).fetchall()
        return TaskList(status=status, total=len(rows), tasks=[_task(row) for row in rows])

    @server.tool(
        name="add",
        title="Add task",
        description=(
            "Add an open task with a title, an optional due date (YYYY-MM-DD) and optional notes. Each call adds "
            "one more task; pass _meta['dev.patchbay/idempotencyKey'] to make a retry safe."
        ),
        annotations=write(idempotent=False),
    )
    def add(
        title: Annotated[str, Field(description="What needs doing", min_length=1, max_length=300)],
        ctx: Context,
        due: Annotated[str | None, Field(description="Due date, YYYY-MM-DD")] = None,
        notes: Annotated[str, Field(description="Free-form notes", max_length=10_000)] = "",
    ) -> Task:
        if not title.strip():
            raise ToolError("The task title must not be blank.")
        due_date = _due_date(due)

        def effect(conn: sqlite3.Connection) -> Task:
            task = Task(
                id=next_id(conn, "task"),
                title=title.strip(),
                notes=notes,
                due=due_date,
                status="open",
                created_at=now_iso(),
                completed_at=None,
            )
            conn.execute(
                "INSERT INTO tasks (id, title, notes, due, status, created_at) VALUES (?, ?, ?, ?, 'open', ?)",
                (task.id, task.title, task.notes, task.due, task.created_at),
            )
            return task

        return store.write(
            tool="add",
            arguments={"title": title.strip(), "due": due_date, "notes": notes},
            key=key_for_call(ctx),
            result_type=Task,
            effect=effect,
        )

    @server.tool(
        name="complete",
        title="Complete task",
        description=(
            "Mark a task as done. Completing a done task changes nothing. "
            "Honours an idempotency key in _meta['dev.patchbay/idempotencyKey']."
        ),
        annotations=write(idempotent=True),
    )
    def complete(task_id: Annotated[str, Field(description="Task id, e.g. task-0001")], ctx: Context) -> CompleteResult:
        def effect(conn: sqlite3.Connection) -> CompleteResult:
            row = _get(conn, task_id)
            if row["status"] == "done":
                return CompleteResult(task=_task(row), already_done=True)
            conn.execute("UPDATE tasks SET status = 'done', completed_at = ? WHERE id = ?", (now_iso(), task_id))
            return CompleteResult(task=_task(_get(conn, task_id)), already_done=False)

        return store.write(
            tool="complete",
            arguments={"task_id": task_id},
            key=key_for_call(ctx),
            result_type=CompleteResult,
            effect=effect,
        )

    @server.tool(
        name="delete",
        title="Delete task",
        description=(
            "Permanently delete a task, open or done; it cannot be recovered. "
            "Honours an idempotency key in _meta['dev.patchbay/idempotencyKey']."
        ),
        annotations=destructive(idempotent=True),
    )
    def delete(task_id: Annotated[str, Field(description="Task id, e.g. task-0001")], ctx: Context) -> DeleteResult:
        def effect(conn: sqlite3.Connection) -> DeleteResult:
            row = _get(conn, task_id)
            conn.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
            return DeleteResult(id=task_id, deleted=True, title=row["title"])

        return store.write(
            tool="delete",
            arguments={"task_id": task_id},
            key=key_for_call(ctx),
            result_type=DeleteResult,
            effect=effect,
        )

    return server


def main(argv: list[str] | None = None) -> None:
    run_main("servers.tasks", build, argv, default_port=DEFAULT_PORT)
