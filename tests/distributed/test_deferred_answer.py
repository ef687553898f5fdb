"""``transport.deferred_answer``: how the event-loop servers (grpc, ucx) wait for a deferred
stream's answer. An answer that comes from another thread (the step that produced the
value) is prepared on that thread; one that comes at once, on the loop's thread, is left to
the server's own threads (the loop must not block)."""

import asyncio
import threading

from tensorweave.distributed import transport


def _prepare(make):
    return threading.get_ident(), make()


def test_an_answer_from_another_thread_is_prepared_there():
    async def scenario():
        future, done = transport.deferred_answer(asyncio.get_running_loop(), _prepare)
        producer = threading.Thread(target=done, args=(lambda: ["chunk"],))
        producer.start()
        make, made = await asyncio.wait_for(future, 10)
        producer.join()
        return make, made, producer.ident

    make, made, producer = asyncio.run(scenario())
    assert make is None and made == (producer, ["chunk"])


def test_an_answer_on_the_loops_thread_is_not_prepared_there():
    prepared = []

    async def scenario():
        future, done = transport.deferred_answer(asyncio.get_running_loop(), prepared.append)
        done(lambda: ["chunk"])  # as start_stream does when the value is already there
        return await asyncio.wait_for(future, 10)

    make, made = asyncio.run(scenario())
    assert made is None and make() == ["chunk"] and prepared == []


def test_only_the_first_answer_counts():
    async def scenario():
        future, done = transport.deferred_answer(asyncio.get_running_loop(), _prepare)
        for value in ("first", "second"):
            t = threading.Thread(target=done, args=(lambda v=value: v,))
            t.start()
            t.join()
        return await asyncio.wait_for(future, 10)

    _make, (_thread, value) = asyncio.run(scenario())
    assert value == "first"


def test_a_failure_to_prepare_is_left_to_the_servers_thread():
    def failing(make):
        raise MemoryError("no room for the chunks")

    async def scenario():
        future, done = transport.deferred_answer(asyncio.get_running_loop(), failing)
        producer = threading.Thread(target=done, args=(lambda: ["chunk"],))
        producer.start()  # the producer's thread does not see the failure
        producer.join()
        return await asyncio.wait_for(future, 10)

    make, made = asyncio.run(scenario())
    assert made is None and make() == ["chunk"]
