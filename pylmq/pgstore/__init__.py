"""The PostgreSQL store: queues, properties and messages in one database that any number of
pylmq nodes share, masterless (docs/postgres.md)."""

from pylmq.pgstore.store import PostgresStore

__all__ = ["PostgresStore"]
