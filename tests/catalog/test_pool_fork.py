"""A forked child (a prefork Celery pool's) starts a pool of its own: the parent's runs on
a thread the child does not have, and its connections are the parent's."""

from __future__ import annotations

import os
import sys
import traceback

import pytest

from hostapp.catalog import pool as catalog_pool

from .conftest import make_server

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_forked_child_lists_tools_through_a_pool_of_its_own_and_leaves_the_parents_alone() -> None:
    server = make_server("tasks", command=sys.executable, args=["-m", "servers.tasks"], trusted=True)
    try:
        parent_pool = catalog_pool.pool_for(server)
        before = [tool["name"] for tool in parent_pool.list_tools("tasks", timeout=30)]
        assert before

        pid = os.fork()
        if pid == 0:  # the child: no database, no pytest; its verdict is its exit status
            status = 1
            try:
                pool = catalog_pool.get_pool()
                assert pool is not parent_pool
                pool.upsert(catalog_pool.runtime_config(server))
                assert [tool["name"] for tool in pool.list_tools("tasks", timeout=30)] == before
                pool.close()
                status = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0

        assert catalog_pool.get_pool() is parent_pool
        assert [tool["name"] for tool in parent_pool.list_tools("tasks", timeout=30)] == before
    finally:
        # Its servers stopped and its last states stored while this test's database exists.
        catalog_pool.close_pool()
