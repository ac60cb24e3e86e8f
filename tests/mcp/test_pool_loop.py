"""A pool given the host's own event loop: async calls skip the thread hop, threads still work."""

from __future__ import annotations

import asyncio

import pytest

from hostapp.mcp import Pool

from .conftest import TEST_POLICY, hostile


def test_a_pool_on_the_callers_loop_serves_that_loop_and_threads() -> None:
    async def main() -> None:
        pool = Pool(TEST_POLICY, loop=asyncio.get_running_loop())
        await pool.aconfigure([hostile("well", "well")])
        try:
            status = await pool.aconnect("well")
            assert status.state == "ready"
            result = await pool.acall_tool("well", "echo", {"text": "on the loop"})
            assert result["content"][0]["text"] == "on the loop"
            # A thread uses the blocking method, which hops onto this loop.
            threaded = await asyncio.to_thread(pool.call_tool, "well", "echo", {"text": "from a thread"})
            assert threaded["content"][0]["text"] == "from a thread"
            # The blocking method on the pool's own loop would deadlock: it is refused.
            with pytest.raises(RuntimeError):
                pool.call_tool("well", "echo", {"text": "no"})
        finally:
            await pool.aclose()

    asyncio.run(main())


def test_closing_a_private_pool_closes_its_loop() -> None:
    pool = Pool(TEST_POLICY)
    loop = pool._loop
    pool.close()
    assert loop.is_closed()
