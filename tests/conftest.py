from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.test import Client


@pytest.fixture
def admin_user(db: None) -> User:
    from django.contrib.auth.models import User

    return User.objects.create_superuser("alice", "alice@example.com", "alice-password-1")


@pytest.fixture
def plain_user(db: None) -> User:
    from django.contrib.auth.models import User

    return User.objects.create_user("olivia", "olivia@example.com", "olivia-password-1")


@pytest.fixture
def admin_client(admin_user: User) -> Client:
    from django.test import Client

    client = Client()
    client.force_login(admin_user)
    return client


@pytest.fixture(autouse=True)
def _fresh_channel_layer(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test gets its own channel layer. The layer keeps asyncio locks and buffers made on
    the event loop that first used it; a consumer cancelled mid-receive in one test (each
    async test has its own loop) can leave the receive lock held and bound to a closed
    loop, and every later socket then fails with "bound to a different event loop".
    A web process has one loop for its whole life, so this is the tests' concern only.
    The events a test queued leave before the next test starts (they are sent in batches)."""
    yield
    from channels.layers import channel_layers
    from pytest_django.plugin import blocking_manager_key

    from hostapp.catalog import pool as catalog_pool
    from hostapp.core import events, processes
    from hostapp.oauth import store

    # The pool events' handler and the credential reader keep a database session (until
    # idle): none may outlive a test's database. The handler's last states send events.
    catalog_pool.events.stop(timeout=5.0)
    store.reader.stop(timeout=5.0)
    events.flush(timeout=2.0)
    # A test whose pool stored states registered this process: its row and heartbeat go
    # with the test (the next one may not have the database).
    if processes.registered():
        with request.config.stash[blocking_manager_key].unblock():
            processes.unregister()

    channel_layers.backends.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the last test, before the session's fixtures (the test database) are torn down:
    close the database connection of asgiref's executor thread. Async tests run their ORM
    calls there (`sync_to_async`), and its connection stays open; PostgreSQL then refuses to
    drop the test database ("being accessed by other users"). And this process's row, with
    its heartbeat, which would otherwise be deleted at exit, after the database is gone."""
    if nextitem is None:
        from asgiref.sync import SyncToAsync
        from django.db import connections
        from pytest_django.plugin import blocking_manager_key

        from hostapp.core import processes

        SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=30)
        # This process's row (it held a pool) goes while the test database is there.
        with item.config.stash[blocking_manager_key].unblock():
            processes.unregister()
    yield
