"""The operator knows when kopf's peering pauses this replica: kopf's own peering code decides,
with real toggles, and :class:`Pause` follows it (so a kopf that logs its pause otherwise
fails here)."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from kopf._cogs.aiokits.aiotoggles import Toggle, ToggleSet
from kopf._cogs.structs.references import Resource
from kopf._core.engines.peering import Identity, process_peering_event

from kcp_shard_operator.controller.peering import PEERING_LOGGER, Pause, follow, unfollow

NAME = "kcp-shard-operator"
PEERINGS = Resource("kopf.dev", "v1", "clusterkopfpeerings")


@pytest.fixture
def pause() -> Iterator[Pause]:
    level = logging.getLogger(PEERING_LOGGER).level
    followed = Pause()
    follow(followed)
    yield followed
    unfollow(followed)
    logging.getLogger(PEERING_LOGGER).setLevel(level)


def peers(**priorities: int) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.UTC).isoformat()
    return {
        identity: {"priority": priority, "lifetime": 60, "lastseen": now}
        for identity, priority in priorities.items()
    }


async def peering_event(toggle: Toggle, status: dict[str, Any]) -> None:
    """kopf's handling of the peering object with ``status``, as replica ``me`` (priority 10)."""
    settings = kopf.OperatorSettings()
    settings.peering.name = NAME
    settings.peering.priority = 10
    pressure = asyncio.Event()
    pressure.set()  # kopf would wait for the other peers' deadlines: not here
    await process_peering_event(
        raw_event={"type": "MODIFIED", "object": {"metadata": {"name": NAME}, "status": status}},
        namespace=None,
        resource=PEERINGS,
        identity=Identity("me"),
        settings=settings,
        stream_pressure=pressure,
        conflicts_found=toggle,
    )


@pytest.mark.parametrize(
    "other", [pytest.param(20, id="higher priority"), pytest.param(10, id="same priority")]
)
def test_paused_while_kopf_pauses_for_another_replica_and_not_once_it_resumes(
    pause: Pause, other: int
) -> None:
    async def scenario() -> None:
        toggle = await ToggleSet(any).make_toggle(name="peering")
        await peering_event(toggle, peers(me=10, other=other))
        assert toggle.is_on()
        assert pause.paused()
        await peering_event(toggle, peers(me=10, other=other))
        assert pause.paused(), "still paused: kopf logs each turn once"
        await peering_event(toggle, peers(me=10))
        assert toggle.is_off()
        assert not pause.paused()

    asyncio.run(scenario())


def test_paused_while_any_of_several_peerings_is(pause: Pause) -> None:
    """One peering object per namespace served: the replica is paused while any one pauses."""

    async def scenario() -> None:
        toggles = ToggleSet(any)
        first, second = await toggles.make_toggle(), await toggles.make_toggle()
        await peering_event(first, peers(me=10, other=20))
        await peering_event(second, peers(me=10, other=20))
        await peering_event(first, peers(me=10))
        assert toggles.is_on()
        assert pause.paused()
        await peering_event(second, peers(me=10))
        assert toggles.is_off()
        assert not pause.paused()

    asyncio.run(scenario())


def test_a_replica_with_the_highest_priority_is_never_paused(pause: Pause) -> None:
    async def scenario() -> None:
        toggle = await ToggleSet(any).make_toggle()
        await peering_event(toggle, peers(me=10, other=5))
        assert toggle.is_off()
        assert not pause.paused()

    asyncio.run(scenario())
