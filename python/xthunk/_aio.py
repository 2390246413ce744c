"""``await execution``: waits for an ``xthunk.Execution`` without blocking the event loop. The
run's thread wakes the loop (``call_soon_threadsafe``) when it finishes; cancelling the
awaiting task cancels the run."""

import asyncio


async def wait(execution):
    if not execution.done():
        loop = asyncio.get_running_loop()
        finished = loop.create_future()

        def settle():
            if not finished.done():
                finished.set_result(None)

        def wake():
            try:
                loop.call_soon_threadsafe(settle)
            except RuntimeError:
                pass  # the loop is closed: nobody awaits any more

        execution._on_done(wake)
        try:
            await finished
        except asyncio.CancelledError:
            execution.cancel()
            raise
    return execution.result()
