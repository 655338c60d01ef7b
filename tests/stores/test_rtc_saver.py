"""The room saver's retries: a save the server answered "success" without writing the file (a
person typing through every save, or a file the server cannot write) is asked for again a few
times, then not until nbrelay's next edit: never in a loop. The server's answer is stood in for
here (``save_room`` replaced): a person typing through every save for seconds cannot be made
to order; ``tests/live/test_saving.py`` runs an interrupted save against a real server."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from nbrelay.stores import rtc_saving


class _Room(SimpleNamespace):
    pending = True


def _room() -> Any:
    return _Room(name="n.ipynb", save_wanted=anyio.Event(), closed=anyio.Event())


async def _until_quiet(asked: list[int], more_than: int = 0) -> None:
    """Wait until the saver has asked more than ``more_than`` times and then not again for half
    a second (fifty times its delay); at most 10 s."""
    with anyio.fail_after(10):
        while True:
            seen = len(asked)
            await anyio.sleep(0.5)
            if seen > more_than and len(asked) == seen:
                return


@pytest.mark.anyio
async def test_interrupted_saves_are_retried_a_few_times_then_wait_for_the_next_edit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []

    async def interrupted(room: Any) -> str:
        asked.append(1)
        return rtc_saving.INTERRUPTED

    monkeypatch.setattr(rtc_saving, "save_room", interrupted)
    room = _room()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rtc_saving.saver, room, 0.01, 1.0)
        room.save_wanted.set()  # an edit
        await _until_quiet(asked)  # a saver asking forever never goes quiet
        assert len(asked) == 1 + rtc_saving.RETRIES
        room.save_wanted.set()  # the next edit asks again, as many times
        await _until_quiet(asked, more_than=1 + rtc_saving.RETRIES)
        assert len(asked) == 2 * (1 + rtc_saving.RETRIES)
        room.closed.set()
        room.save_wanted.set()
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_save_that_succeeds_ends_the_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [rtc_saving.INTERRUPTED, None]
    asked: list[int] = []

    async def once_interrupted(room: Any) -> str | None:
        asked.append(1)
        return answers.pop(0) if answers else None

    monkeypatch.setattr(rtc_saving, "save_room", once_interrupted)
    room = _room()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rtc_saving.saver, room, 0.01, 1.0)
        room.save_wanted.set()
        await _until_quiet(asked)
        assert len(asked) == 2  # interrupted, then saved: nothing more to ask
        tg.cancel_scope.cancel()


@pytest.mark.anyio
@pytest.mark.parametrize("pace", [2.0, 0.5])
async def test_a_save_waits_pace_times_the_last_ones_length_after_it(
    monkeypatch: pytest.MonkeyPatch, pace: float
) -> None:
    """A big notebook's save keeps the server busy; edits every 50 ms would otherwise have it
    save back to back. Each save starts no sooner than ``pace`` times the last one's length
    after it ended (a lower bound: a busy machine only makes the gaps longer)."""
    saves: list[tuple[float, float]] = []

    async def slow(room: Any) -> None:
        began = anyio.current_time()
        await anyio.sleep(0.2)
        saves.append((began, anyio.current_time()))

    monkeypatch.setattr(rtc_saving, "save_room", slow)
    room = _room()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: rtc_saving.saver(room, 0.01, 1.0, pace=pace))
        with anyio.move_on_after(3):
            while True:  # an agent editing on and on
                room.save_wanted.set()
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    assert len(saves) >= 2
    for (began, ended), (next_began, _) in itertools.pairwise(saves):
        assert next_began - ended >= pace * (ended - began)
