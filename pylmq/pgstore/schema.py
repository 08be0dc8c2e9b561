"""The database layout (schema ``lmq``) and its versioned migrations, which every node applies
at start under an advisory lock: the first node on an empty database creates it, the others wait
and find it done. A node refuses a database whose version is newer than it knows.

Operators may read these tables with SQL (docs/postgres.md#tables); only nodes write them.
"""

from __future__ import annotations

from typing import Any, Final

from pylmq.errors import ConfigError

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate"]

# Any 64-bit number no other user of the database takes: the migration's advisory lock.
_LOCK: Final = 0x706C6D71_00000001

# Each migration is applied once, in one transaction, in order. Never edit a released one:
# append a new one.
MIGRATIONS: Final[tuple[tuple[int, str], ...]] = (
    (
        1,
        """
CREATE TABLE lmq.queue (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name   text NOT NULL UNIQUE,
    props  jsonb NOT NULL DEFAULT '{}',  -- the queue's own (raw) properties
    seq    bigint NOT NULL DEFAULT 0     -- push order of grouped (FIFO) messages
);
CREATE TABLE lmq.setting (
    key    text PRIMARY KEY,             -- 'defaults': the default property list
    value  jsonb NOT NULL
);
CREATE TABLE lmq.virtual (
    name     text PRIMARY KEY,
    members  text[] NOT NULL
);
CREATE TABLE lmq.dedup (                 -- SQS FIFO deduplication ids within their window
    queue_id    bigint NOT NULL REFERENCES lmq.queue (id) ON DELETE CASCADE,
    key         text NOT NULL,
    sent        float8 NOT NULL,
    message_id  text NOT NULL,
    sequence    text NOT NULL,
    PRIMARY KEY (queue_id, key)
);
CREATE TABLE lmq.message (
    queue_id       bigint NOT NULL REFERENCES lmq.queue (id) ON DELETE CASCADE,
    ts             float8 NOT NULL,      -- due time, or deadline in processing (node clock, Unix s)
    uuid           uuid NOT NULL,        -- a new one per delivery
    state          smallint NOT NULL,    -- 0 available, 1 processing, 2 accumulating
    compound       boolean NOT NULL,
    retry          integer,              -- deliveries left; NULL: infinity
    content        bytea NOT NULL,       -- msgpack of the item, or of the list of items
    nbytes         integer NOT NULL,     -- payload bytes (StoredMessage.nbytes)
    key            bigint NOT NULL,      -- msg_key(uuid): queue_server's msg_id
    ext            boolean NOT NULL DEFAULT false,  -- has a MessageExt (the columns below)
    priority       smallint NOT NULL DEFAULT 0,
    expires        float8,
    hard           boolean NOT NULL DEFAULT false,
    interval       float8,
    once           boolean NOT NULL DEFAULT false,
    attempts       integer NOT NULL DEFAULT 0,
    first_at       float8,
    last_at        float8,
    sent_at        float8,
    grp            text,
    seq            bigint NOT NULL DEFAULT 0,
    dead_origin    text,
    dead_failures  integer,
    dead_last_at   float8,
    dead_reason    text,
    PRIMARY KEY (queue_id, uuid)
);
""",
    ),
)
SCHEMA_VERSION: Final[int] = MIGRATIONS[-1][0]


async def migrate(conn: Any) -> int:
    """Bring the database's schema ``lmq`` to :data:`SCHEMA_VERSION` (``conn``: an asyncpg
    connection); the version it was at. Concurrent nodes wait on one advisory lock."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
        await conn.execute("CREATE SCHEMA IF NOT EXISTS lmq")
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS lmq.schema_version"
            " (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        found: int = await conn.fetchval("SELECT coalesce(max(version), 0) FROM lmq.schema_version")
        if found > SCHEMA_VERSION:
            raise ConfigError(
                f"the database's lmq schema is version {found}, newer than this node knows ({SCHEMA_VERSION}):"
                " upgrade pylmq on this node"
            )
        for version, sql in MIGRATIONS:
            if version > found:
                await conn.execute(sql)
                await conn.execute("INSERT INTO lmq.schema_version (version) VALUES ($1)", version)
        return found
