"""Create the service's Kafka topics (events + dead letters) when they are missing."""

from __future__ import annotations

import asyncio
import logging

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from service.config import Settings

logger = logging.getLogger(__name__)


async def ensure_topics(settings: Settings) -> None:
    """Create ``events_topic`` (``settings.partitions`` partitions) and ``deadletter_topic``."""
    admin = AIOKafkaAdminClient(**settings.kafka_options())
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(settings.events_topic, settings.partitions, settings.topic_replication),
            NewTopic(settings.deadletter_topic, 1, settings.topic_replication),
        ]
        missing = [t for t in wanted if t.name not in existing]
        if missing:
            try:
                await admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass  # another process created it in between
            logger.info("created topics %s", [t.name for t in missing])
    finally:
        await admin.close()


def ensure_topics_sync(settings: Settings) -> None:
    asyncio.run(ensure_topics(settings))
