"""The layer sender (``scheduling.layer_sender``): every message reaches its group through
the real channel layer (Redis pub/sub), each group's in the order they were queued."""

from __future__ import annotations

import asyncio

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from scheduling.layer_sender import LayerSender


def test_each_groups_messages_arrive_in_order_among_other_groups():
    groups = [f"sender-test-{n}" for n in range(48)]

    async def listen_while_sent() -> dict[str, list[int]]:
        """In one event loop, as a page's process listens (the layer subscribes per loop)."""
        layer = get_channel_layer()
        channels = {}
        for group in groups:
            channels[group] = await layer.new_channel()
            await layer.group_add(group, channels[group])
        sender = LayerSender()
        for n in range(5):  # each group's messages interleaved with every other group's
            for group in groups:
                sender.submit(group, {"type": "probe", "n": n, "group": group})
        assert await asyncio.to_thread(sender.flush, 30)
        got: dict[str, list[int]] = {}
        for group, channel in channels.items():
            for _ in range(5):
                message = await asyncio.wait_for(layer.receive(channel), timeout=5)
                assert message["group"] == group
                got.setdefault(group, []).append(message["n"])
            await layer.group_discard(group, channel)
        return got

    assert async_to_sync(listen_while_sent)() == {group: [0, 1, 2, 3, 4] for group in groups}
