"""The database layout (schema ``lmq``) and its versioned migrations, which every node applies
at start under an advisory lock: the first node on an empty database creates it, the others wait
and find it done. A node refuses a database whose version is newer than it knows.

Operators may read these tables with SQL (docs/postgres.md#tables); only nodes write them.
"""

from __future__ import annotations

import re
from typing import Any, Final

from pylmq.errors import ConfigError

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate"]

# Any 64-bit number no other user of the database takes: the migration's advisory lock.
_LOCK: Final = 0x706C6D71_00000001

# Two statements every message function runs, written once here and spelled out in each
# function's body when the migration is built: as nested function calls they cost more than
# half of a short operation's time in PostgreSQL (a cycle's state reads went from 315 to 122 us).
#   @count(QUEUE; SIZE, NBYTES, IN_FLIGHT);  adds the deltas to this connection's counter shard
#   @state(QUEUE);                           reads the queue's state into st_size, st_nbytes,
#                                            st_in_flight, st_first (counters and first record)
_COUNT = """INSERT INTO lmq.queue_count AS qc VALUES ({q}, pg_backend_pid() % 8, {deltas})
    ON CONFLICT (queue_id, shard) DO UPDATE SET size = qc.size + EXCLUDED.size,
        nbytes = qc.nbytes + EXCLUDED.nbytes, in_flight = qc.in_flight + EXCLUDED.in_flight;"""
_STATE = """SELECT coalesce(sum(qc.size), 0)::bigint, coalesce(sum(qc.nbytes), 0)::bigint,
           coalesce(sum(qc.in_flight), 0)::bigint,
           (SELECT fm.ts FROM lmq.message fm WHERE fm.queue_id = {q} AND NOT fm.held
            ORDER BY fm.ts, fm.uuid LIMIT 1)
    INTO st_size, st_nbytes, st_in_flight, st_first FROM lmq.queue_count qc WHERE qc.queue_id = {q};"""
_MACRO = re.compile(r"@(count|state)\((\w+)(?:; ([^;]*))?\);")


def _expand(sql: str) -> str:
    """The migration's SQL with each ``@count``/``@state`` spelled out."""

    def one(m: re.Match[str]) -> str:
        return (_COUNT if m[1] == "count" else _STATE).format(q=m[2], deltas=m[3])

    return _MACRO.sub(one, sql)


# Each migration is applied once, in one transaction, in order. Never edit a released one:
# append a new one.
MIGRATIONS: Final[tuple[tuple[int, str], ...]] = (
    (
        1,
        _expand("""
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
    queue_id       bigint NOT NULL,      -- lmq.queue's id (no foreign key: see lmq.queue_gone)
    ts             float8 NOT NULL,      -- due time, or deadline in processing (node clock, Unix s)
    uuid           uuid NOT NULL,        -- a new one per delivery
    state          smallint NOT NULL,    -- 0 available, 1 processing, 2 accumulating
    compound       boolean NOT NULL,
    retry          bigint,               -- deliveries left; NULL: infinity
    content        bytea NOT NULL,       -- msgpack of the item; a compound's items, one after another
    nbytes         integer NOT NULL,     -- payload bytes (StoredMessage.nbytes)
    key            bigint NOT NULL,      -- msg_key(uuid): queue_server's msg_id
    held           boolean NOT NULL DEFAULT false,  -- a grouped record waiting behind its group's head
    again          boolean NOT NULL DEFAULT false,  -- available again under a uuid it was delivered with
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
) WITH (
    -- A queue table is a stream: every row is inserted, updated once per delivery (new ts and
    -- uuid, so never a HOT update) and deleted by its ack. The default thresholds (20% of the
    -- table) let a deep queue pile up millions of dead rows, which the delivery probe walks
    -- over in the (queue_id, ts, uuid) index before vacuum clears them: vacuum instead after a
    -- fixed number of dead rows whatever the table's size, and after inserts too (a backlog
    -- being filled), so the index stays close to the live rows.
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 20000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 50000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
-- The id order of the records a dequeue may take (all but grouped records waiting behind their
-- head): delivery, the first record's ts (QueueState.first_ts) and peek walk it.
CREATE INDEX message_due ON lmq.message (queue_id, ts, uuid) WHERE NOT held;
-- The same order for the waiting grouped records (empty in queues without groups): peek merges it.
CREATE INDEX message_held ON lmq.message (queue_id, ts, uuid) WHERE held;
-- Records with a priority: their levels, and each level's records in id order (FIFO).
CREATE INDEX message_priority ON lmq.message (queue_id, priority DESC, ts, uuid) WHERE priority > 0 AND NOT held;
-- A group's head (held false) and its waiting records in push order (held true, by seq).
CREATE INDEX message_group ON lmq.message (queue_id, grp, held, seq) WHERE grp IS NOT NULL;
-- Deliveries by queue_server's integer msg_id.
CREATE INDEX message_key ON lmq.message (queue_id, key) WHERE state = 1;
-- The open accumulation window (at most one or two per queue).
CREATE INDEX message_accum ON lmq.message (queue_id, ts) WHERE state = 2;

-- Each queue's counts, as deltas summed over up to 8 shards: every message operation adds its
-- delta to the shard of its connection (pg_backend_pid() % 8) in its own transaction, so that
-- concurrent operations seldom wait on one row, and a queue's state is 8 rows, not a scan.
-- Updates touch no indexed column: HOT updates within the page (fillfactor leaves room), and
-- frequent vacuum keeps this hot little table to a few pages.
CREATE TABLE lmq.queue_count (
    queue_id   bigint NOT NULL,
    shard      smallint NOT NULL,
    size       bigint NOT NULL,
    nbytes     bigint NOT NULL,
    in_flight  bigint NOT NULL,
    PRIMARY KEY (queue_id, shard)
) WITH (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

-- A queue's messages and counts go with it. Not by foreign keys: their check on every insert
-- (and on updates of rows a transaction inserted) locks the queue's row FOR KEY SHARE, so every
-- concurrent push and delivery of a queue would share locks on that one row (MultiXacts, the
-- known cost of foreign keys on a hot parent row). Queue ids are never reused (identity).
-- Without a foreign key, a write that adds records to a queue (push, enqueue, a dead letter, a
-- requeue) must not land under a queue id a concurrent DELETE removes: it takes the queue's
-- advisory lock in shared mode and checks that the queue row is there (raising 23503,
-- foreign_key_violation, when not: the node creates the queue again and retries), and the
-- delete takes it in exclusive mode here, so either the write commits first and its records
-- go with the queue, or it waits and finds the row gone. Deliveries and acks add no record:
-- they take no lock.
CREATE FUNCTION lmq.queue_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('lmq.queue:' || OLD.id, 0));
    DELETE FROM lmq.message WHERE queue_id = OLD.id;
    DELETE FROM lmq.queue_count WHERE queue_id = OLD.id;
    RETURN OLD;
END
$$;
CREATE TRIGGER queue_gone AFTER DELETE ON lmq.queue FOR EACH ROW EXECUTE FUNCTION lmq.queue_gone();

-- msg_key(uuid): the last 53 bits of the uuid.
CREATE FUNCTION lmq.msg_key(u uuid) RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ('x' || encode(substring(uuid_send(u) FROM 9 FOR 8), 'hex'))::bit(64)::bigint & 9007199254740991
$$;

-- Every message function adds its deltas to lmq.queue_count with the same inline statement
-- (INSERT ... ON CONFLICT on the shard pg_backend_pid() % 8), not through a helper function:
-- a nested call is one more executor start and PL/pgSQL frame, and every operation counts.
-- The wake-up of other nodes is inline too: pg_notify('lmq_due', '<queue id>:<ts>').

-- The helpers below are PL/pgSQL, not SQL functions: called from PL/pgSQL, a SQL function is
-- planned again at every call, a PL/pgSQL statement once per session.
-- The queue's state: its counters and one probe of the first record (never a scan), in one
-- statement. The message functions run this same statement inline rather than call this
-- function: a nested PL/pgSQL call is one more executor start and function frame per
-- operation, and the state is computed by every operation.
CREATE FUNCTION lmq.queue_state(q bigint, OUT st_size bigint, OUT st_nbytes bigint,
                                OUT st_in_flight bigint, OUT st_first float8)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    @state(q);
END
$$;

-- The record of group g that was its head left queue q: the group's next record (by seq)
-- becomes the head, unless one already is. Under the group's lock, which a grouped push takes
-- too, so that a push never sees a head that is leaving without this seeing the push.
CREATE FUNCTION lmq.group_left(q bigint, g text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t float8;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('lmq.group:' || q || ':' || g, 0));
    IF EXISTS (SELECT 1 FROM lmq.message m WHERE m.queue_id = q AND m.grp = g AND NOT m.held) THEN
        RETURN;
    END IF;
    UPDATE lmq.message m SET held = false
    WHERE m.queue_id = q AND m.uuid = (
        SELECT w.uuid FROM lmq.message w WHERE w.queue_id = q AND w.grp = g AND w.held
        ORDER BY w.seq LIMIT 1 FOR UPDATE)
    RETURNING m.ts INTO t;
    IF FOUND THEN
        PERFORM pg_notify('lmq_due', q::text || ':' || t::text);
    END IF;
END
$$;

-- enqueue: LMQ's push with the queue's accum (a compound record opened or appended to).
CREATE FUNCTION lmq.enqueue(q bigint, item bytea, n integer, p_retry bigint, accum float8, now_ float8,
                            OUT result text, OUT st_size bigint, OUT st_nbytes bigint,
                            OUT st_in_flight bigint, OUT st_first float8)
LANGUAGE plpgsql AS $$
DECLARE
    u uuid;
    t float8;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('lmq.queue:' || q, 0));
    IF NOT EXISTS (SELECT 1 FROM lmq.queue lq WHERE lq.id = q) THEN
        RAISE foreign_key_violation USING MESSAGE = 'queue ' || q || ' was deleted';
    END IF;
    IF accum <= 0 THEN
        u := gen_random_uuid();
        INSERT INTO lmq.message (queue_id, ts, uuid, state, compound, retry, content, nbytes, key)
        VALUES (q, now_, u, 0, false, p_retry, item, n, lmq.msg_key(u));
        @count(q; 1, n, 0);
        PERFORM pg_notify('lmq_due', q::text || ':' || now_::text);
        result := 'no';
    ELSE
        -- One window per queue: pushes that accumulate take turns, so that two never open two.
        PERFORM pg_advisory_xact_lock(hashtextextended('lmq.accum:' || q, 0));
        SELECT m.uuid INTO u FROM lmq.message m
        WHERE m.queue_id = q AND m.state = 2 AND m.ts >= now_ ORDER BY m.ts DESC LIMIT 1 FOR UPDATE;
        IF FOUND THEN
            UPDATE lmq.message m SET content = m.content || item, nbytes = m.nbytes + n
            WHERE m.queue_id = q AND m.uuid = u;
            @count(q; 0, n, 0);
            result := 'yes';
        ELSE
            u := gen_random_uuid();
            t := now_ + accum;
            INSERT INTO lmq.message (queue_id, ts, uuid, state, compound, retry, content, nbytes, key)
            VALUES (q, t, u, 2, true, p_retry, item, n, lmq.msg_key(u));
            @count(q; 1, n, 0);
            PERFORM pg_notify('lmq_due', q::text || ':' || t::text);
            result := 'new';
        END IF;
    END IF;
    @state(q);
END
$$;

-- push with per-message options, already resolved by the caller (pure functions of the
-- arguments): the record's ts and stored retry, whether it has an ext, and the ext's columns.
CREATE FUNCTION lmq.push(q bigint, item bytea, n integer, p_retry bigint, t float8, p_ext boolean,
                         p_expires float8, p_interval float8, p_priority smallint, p_once boolean,
                         p_hard boolean, p_grp text, now_ float8,
                         OUT id uuid, OUT st_size bigint, OUT st_nbytes bigint,
                         OUT st_in_flight bigint, OUT st_first float8)
LANGUAGE plpgsql AS $$
DECLARE
    s bigint := 0;
    h boolean := false;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('lmq.queue:' || q, 0));
    IF NOT EXISTS (SELECT 1 FROM lmq.queue lq WHERE lq.id = q) THEN
        RAISE foreign_key_violation USING MESSAGE = 'queue ' || q || ' was deleted';
    END IF;
    id := gen_random_uuid();
    IF p_grp IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('lmq.group:' || q || ':' || p_grp, 0));
        UPDATE lmq.queue SET seq = seq + 1 WHERE queue.id = q RETURNING seq - 1 INTO s;
        h := EXISTS (SELECT 1 FROM lmq.message m WHERE m.queue_id = q AND m.grp = p_grp AND NOT m.held);
    END IF;
    INSERT INTO lmq.message (queue_id, ts, uuid, state, compound, retry, content, nbytes, key, held, ext,
                             priority, expires, hard, interval, once, sent_at, grp, seq)
    VALUES (q, t, id, 0, false, p_retry, item, n, lmq.msg_key(id), h, p_ext,
            p_priority, p_expires, p_hard, p_interval, p_once, CASE WHEN p_ext THEN now_ END, p_grp, s);
    @count(q; 1, n, 0);
    IF NOT h THEN
        PERFORM pg_notify('lmq_due', q::text || ':' || t::text);
    END IF;
    @state(q);
END
$$;

-- dequeue: the first deliverable record (the highest priority among due ones, then id order),
-- redelivered under a new uuid with deadline now + timeout (or its interval); exhausted ones on
-- the way are dropped or moved to dlq (with dlq_retry, NULL: infinity, when dlq is not NULL).
CREATE FUNCTION lmq.dequeue(q bigint, tmo float8, now_ float8, dlq bigint, dlq_retry bigint,
                            OUT m lmq.message, OUT retention float8, OUT ndead integer,
                            OUT st_size bigint, OUT st_nbytes bigint,
                            OUT st_in_flight bigint, OUT st_first float8)
LANGUAGE plpgsql AS $$
DECLARE
    r lmq.message;
    expired boolean;
    deadline float8;
    nu uuid;
    nr bigint;
    reason text;
    origin text;
    level integer;
BEGIN
    ndead := 0;
    LOOP
        -- The highest level with a due record: a walk of the levels (two probes each), not of
        -- their records, which may be many and not due yet.
        level := 256;
        LOOP
            SELECT max(x.priority) INTO level FROM lmq.message x
            WHERE x.queue_id = q AND x.priority > 0 AND x.priority < level AND NOT x.held;
            EXIT WHEN level IS NULL;
            SELECT * INTO r FROM lmq.message x
            WHERE x.queue_id = q AND x.priority = level AND NOT x.held AND x.ts <= now_
            ORDER BY x.ts, x.uuid LIMIT 1 FOR UPDATE SKIP LOCKED;
            EXIT WHEN FOUND;
        END LOOP;
        IF level IS NULL THEN
            SELECT * INTO r FROM lmq.message x
            WHERE x.queue_id = q AND NOT x.held AND x.ts <= now_
            ORDER BY x.ts, x.uuid LIMIT 1 FOR UPDATE SKIP LOCKED;
            EXIT WHEN NOT FOUND;
        END IF;
        expired := r.ext AND r.expires IS NOT NULL AND now_ >= r.expires;
        reason := NULL;
        IF expired AND r.hard THEN
            reason := 'drop';  -- a hard expiry: gone, never dead-lettered
        ELSIF expired AND (r.attempts > 0 OR r.retry <= 0) THEN
            reason := 'expired';
        ELSIF r.retry <= 0 THEN
            reason := 'retries';
        END IF;
        IF reason IS NOT NULL THEN
            DELETE FROM lmq.message x WHERE x.queue_id = q AND x.uuid = r.uuid;
            @count(q; -1, -r.nbytes, CASE WHEN r.state = 1 THEN -1 ELSE 0 END);
            IF r.grp IS NOT NULL THEN
                PERFORM lmq.group_left(q, r.grp);
            END IF;
            IF dlq IS NOT NULL AND reason <> 'drop' AND NOT r.once THEN
                IF origin IS NULL THEN
                    SELECT name INTO origin FROM lmq.queue WHERE id = q;
                    PERFORM pg_advisory_xact_lock_shared(hashtextextended('lmq.queue:' || dlq, 0));
                    IF NOT EXISTS (SELECT 1 FROM lmq.queue lq WHERE lq.id = dlq) THEN
                        RAISE foreign_key_violation USING MESSAGE = 'queue ' || dlq || ' was deleted';
                    END IF;
                END IF;
                nu := gen_random_uuid();
                INSERT INTO lmq.message (queue_id, ts, uuid, state, compound, retry, content, nbytes, key,
                                         ext, priority, sent_at, dead_origin, dead_failures, dead_last_at, dead_reason)
                VALUES (dlq, now_, nu, 0, r.compound, dlq_retry + 1, r.content, r.nbytes, lmq.msg_key(nu),
                        true, r.priority, r.sent_at, origin, r.attempts, r.last_at, reason);
                @count(dlq; 1, r.nbytes, 0);
                PERFORM pg_notify('lmq_due', dlq::text || ':' || now_::text);
                ndead := ndead + 1;
            END IF;
            CONTINUE;
        END IF;
        nu := gen_random_uuid();
        IF r.ext THEN
            deadline := now_ + coalesce(r.interval, tmo);
            IF NOT r.hard AND (expired OR (r.expires IS NOT NULL AND deadline >= r.expires)) THEN
                nr := 0;  -- queue_server's ttl: the delivery whose deadline reaches expires is the last
            ELSE
                nr := r.retry - 1;
            END IF;
            UPDATE lmq.message x SET ts = deadline, uuid = nu, key = lmq.msg_key(nu), state = 1, retry = nr,
                again = false, attempts = x.attempts + 1, first_at = coalesce(x.first_at, now_), last_at = now_
            WHERE x.queue_id = q AND x.uuid = r.uuid RETURNING * INTO m;
        ELSE
            UPDATE lmq.message x SET ts = now_ + tmo, uuid = nu, key = lmq.msg_key(nu), state = 1, again = false,
                retry = x.retry - 1
            WHERE x.queue_id = q AND x.uuid = r.uuid RETURNING * INTO m;
        END IF;
        IF r.state <> 1 THEN
            @count(q; 0, 0, 1);
        END IF;
        retention := now_ - r.ts;
        EXIT;
    END LOOP;
    @state(q);
END
$$;

-- done (ack): the record in processing whose deadline has not passed leaves its queue.
CREATE FUNCTION lmq.done(q bigint, u uuid, now_ float8,
                         OUT ok boolean, OUT st_size bigint, OUT st_nbytes bigint,
                         OUT st_in_flight bigint, OUT st_first float8)
LANGUAGE plpgsql AS $$
DECLARE
    n integer;
    g text;
    h boolean;
BEGIN
    DELETE FROM lmq.message m WHERE m.queue_id = q AND m.uuid = u AND m.state = 1 AND m.ts >= now_
    RETURNING m.nbytes, m.grp, m.held INTO n, g, h;
    ok := FOUND;
    IF ok THEN
        @count(q; -1, -n, -1);
        IF g IS NOT NULL AND NOT h THEN
            PERFORM lmq.group_left(q, g);
        END IF;
    END IF;
    @state(q);
END
$$;

-- move: the record in processing (deadline not passed) under u takes a new ts and state; uuid
-- and content stay. mode 'retain' (new deadline: now + its interval or tmo), 'release' (nack:
-- available now, the retry stays spent), 'put_back' (available now, the delivery undone: its
-- retry back and its delivery count less one).
CREATE FUNCTION lmq.move(q bigint, u uuid, mode text, tmo float8, now_ float8,
                         OUT ok boolean, OUT st_size bigint, OUT st_nbytes bigint,
                         OUT st_in_flight bigint, OUT st_first float8)
LANGUAGE plpgsql AS $$
DECLARE
    t float8;
BEGIN
    IF mode = 'retain' THEN
        UPDATE lmq.message m SET ts = now_ + coalesce(m.interval, tmo)
        WHERE m.queue_id = q AND m.uuid = u AND m.state = 1 AND m.ts >= now_;
        ok := FOUND;
    ELSIF mode = 'release' THEN
        UPDATE lmq.message m SET ts = now_, state = 0, again = true
        WHERE m.queue_id = q AND m.uuid = u AND m.state = 1 AND m.ts >= now_;
        ok := FOUND;
    ELSE
        UPDATE lmq.message m SET ts = now_, state = 0, again = true, retry = m.retry + 1,
            attempts = CASE WHEN m.attempts <= 1 THEN 0 ELSE m.attempts - 1 END,
            first_at = CASE WHEN m.attempts <= 1 THEN NULL ELSE m.first_at END,
            last_at = CASE WHEN m.attempts <= 1 THEN NULL ELSE m.last_at END
        WHERE m.queue_id = q AND m.uuid = u AND m.state = 1 AND m.ts >= now_;
        ok := FOUND;
    END IF;
    IF ok AND mode <> 'retain' THEN
        @count(q; 0, 0, -1);
        PERFORM pg_notify('lmq_due', q::text || ':' || now_::text);
    END IF;
    @state(q);
END
$$;

-- claim: take records back by the uuid of their last delivery (QueueTable.claim): one in
-- processing (held or not) or available again under that uuid (nacked, put back; or any with an
-- ext, whose uuid the table finds as it finds a delivery's) becomes processing until now +
-- its interval or tmo; one nobody holds spends a retry (and is dropped with none left). Rows
-- (ord, record) in the order of us, a NULL record for a uuid not claimed, stopping once max_bytes
-- of payload are claimed; then one last row (ord NULL) with the queue's state.
CREATE FUNCTION lmq.claim(q bigint, us uuid[], tmo float8, now_ float8, max_bytes bigint)
RETURNS TABLE (ord integer, m lmq.message, st_size bigint, st_nbytes bigint,
               st_in_flight bigint, st_first float8)
LANGUAGE plpgsql AS $$
DECLARE
    r lmq.message;
    held_now boolean;
    total bigint := 0;
    seen uuid[] := '{}';
BEGIN
    FOR i IN 1 .. coalesce(array_length(us, 1), 0) LOOP
        EXIT WHEN max_bytes IS NOT NULL AND total >= max_bytes;
        ord := i;
        m := NULL;
        IF us[i] = ANY (seen) THEN  -- a uuid named twice is claimed once
            RETURN NEXT;
            CONTINUE;
        END IF;
        seen := seen || us[i];
        SELECT * INTO r FROM lmq.message x
        WHERE x.queue_id = q AND x.uuid = us[i] AND (x.state = 1 OR (x.state = 0 AND (x.again OR x.ext)))
        FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN NEXT;
            CONTINUE;
        END IF;
        held_now := r.state = 1 AND r.ts >= now_;
        IF NOT held_now AND r.retry <= 0 THEN  -- as a pull would: discarded
            DELETE FROM lmq.message x WHERE x.queue_id = q AND x.uuid = r.uuid;
            @count(q; -1, -r.nbytes, CASE WHEN r.state = 1 THEN -1 ELSE 0 END);
            IF r.grp IS NOT NULL AND NOT r.held THEN
                PERFORM lmq.group_left(q, r.grp);
            END IF;
            RETURN NEXT;
            CONTINUE;
        END IF;
        UPDATE lmq.message x SET ts = now_ + coalesce(x.interval, tmo), state = 1, held = false, again = false,
            retry = CASE WHEN held_now THEN x.retry ELSE x.retry - 1 END,
            attempts = CASE WHEN held_now OR NOT x.ext THEN x.attempts ELSE x.attempts + 1 END,
            first_at = CASE WHEN held_now OR NOT x.ext THEN x.first_at ELSE coalesce(x.first_at, now_) END,
            last_at = CASE WHEN held_now OR NOT x.ext THEN x.last_at ELSE now_ END
        WHERE x.queue_id = q AND x.uuid = r.uuid RETURNING * INTO m;
        IF r.state <> 1 THEN
            @count(q; 0, 0, 1);
        END IF;
        IF r.held THEN
            -- A waiting grouped record taken: it is its group's record in processing now, the
            -- group's head waits behind it (as the table's groups do).
            UPDATE lmq.message x SET held = true
            WHERE x.queue_id = q AND x.grp = r.grp AND NOT x.held AND x.uuid <> r.uuid;
        END IF;
        total := total + r.nbytes;
        RETURN NEXT;
    END LOOP;
    ord := NULL;
    m := NULL;
    @state(q);
    RETURN NEXT;
END
$$;

-- peek: up to lim records in id order after (a_ts, a_uuid), or after the record a_uuid when
-- by_uuid (SQLSTATE P0002 when it has left), or from the first when a_ts and by_uuid are unset.
-- Two index walks (the deliverable order and the waiting grouped records) merged.
CREATE FUNCTION lmq.peek(q bigint, a_ts float8, a_uuid uuid, by_uuid boolean, lim integer)
RETURNS SETOF lmq.message LANGUAGE plpgsql STABLE AS $$
DECLARE
    t float8 := a_ts;
BEGIN
    IF by_uuid THEN
        SELECT x.ts INTO t FROM lmq.message x WHERE x.queue_id = q AND x.uuid = a_uuid;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'the peek cursor''s message has left the queue' USING ERRCODE = 'no_data_found';
        END IF;
    END IF;
    IF t IS NULL THEN
        RETURN QUERY SELECT * FROM (
            (SELECT * FROM lmq.message x WHERE x.queue_id = q AND NOT x.held ORDER BY x.ts, x.uuid LIMIT lim)
            UNION ALL
            (SELECT * FROM lmq.message x WHERE x.queue_id = q AND x.held ORDER BY x.ts, x.uuid LIMIT lim)
        ) y ORDER BY y.ts, y.uuid LIMIT lim;
    ELSE
        RETURN QUERY SELECT * FROM (
            (SELECT * FROM lmq.message x WHERE x.queue_id = q AND NOT x.held AND (x.ts, x.uuid) > (t, a_uuid)
             ORDER BY x.ts, x.uuid LIMIT lim)
            UNION ALL
            (SELECT * FROM lmq.message x WHERE x.queue_id = q AND x.held AND (x.ts, x.uuid) > (t, a_uuid)
             ORDER BY x.ts, x.uuid LIMIT lim)
        ) y ORDER BY y.ts, y.uuid LIMIT lim;
    END IF;
END
$$;

-- requeue: up to cnt available dead letters of dlq, first first, go to to_id (with to_retry)
-- or, when to_id is NULL, to their origin (names[k] -> ids[k], retries[k]; those in keep stay),
-- as requeued_record makes them. Rows: each touched queue (dlq included) with how many landed
-- in it and its state.
CREATE FUNCTION lmq.requeue(dlq bigint, cnt integer, to_id bigint, to_retry bigint, names text[],
                            ids bigint[], retries bigint[], keep text[], now_ float8)
RETURNS TABLE (qid bigint, moved integer, st_size bigint, st_nbytes bigint,
               st_in_flight bigint, st_first float8)
LANGUAGE plpgsql AS $$
DECLARE
    r lmq.message;
    k integer;
    tgt bigint;
    tr bigint;
    nu uuid;
    landed bigint[] := '{}';
BEGIN
    FOR r IN
        SELECT * FROM lmq.message x
        WHERE x.queue_id = dlq AND NOT x.held AND x.state = 0 AND x.dead_origin IS NOT NULL
          AND (to_id IS NOT NULL OR NOT (x.dead_origin = ANY (keep)))
        ORDER BY x.ts, x.uuid LIMIT cnt FOR UPDATE SKIP LOCKED
    LOOP
        IF to_id IS NOT NULL THEN
            tgt := to_id;
            tr := to_retry;
        ELSE
            k := array_position(names, r.dead_origin);
            CONTINUE WHEN k IS NULL;
            tgt := ids[k];
            tr := retries[k];
        END IF;
        PERFORM pg_advisory_xact_lock_shared(hashtextextended('lmq.queue:' || tgt, 0));
        IF NOT EXISTS (SELECT 1 FROM lmq.queue lq WHERE lq.id = tgt) THEN
            RAISE foreign_key_violation USING MESSAGE = 'queue ' || tgt || ' was deleted';
        END IF;
        DELETE FROM lmq.message x WHERE x.queue_id = dlq AND x.uuid = r.uuid;
        @count(dlq; -1, -r.nbytes, 0);
        nu := gen_random_uuid();
        INSERT INTO lmq.message (queue_id, ts, uuid, state, compound, retry, content, nbytes, key,
                                 ext, priority, sent_at)
        VALUES (tgt, now_, nu, 0, r.compound, tr + 1, r.content, r.nbytes, lmq.msg_key(nu),
                true, r.priority, r.sent_at);
        @count(tgt; 1, r.nbytes, 0);
        PERFORM pg_notify('lmq_due', tgt::text || ':' || now_::text);
        landed := landed || tgt;
    END LOOP;
    FOR qid, moved IN
        SELECT dlq, 0 WHERE NOT (dlq = ANY (landed))
        UNION ALL
        SELECT l, count(*)::integer FROM unnest(landed) l GROUP BY l
    LOOP
        @state(qid);
        RETURN NEXT;
    END LOOP;
END
$$;
"""),
    ),
    (
        2,
        _expand("""
-- push_dedup: lmq.push of a record that takes an SQS FIFO deduplication id, in one
-- transaction: the id's row is inserted (or an expired one, sent at or before horizon, taken
-- over) and the record pushed, or, when another send holds the id, nothing is pushed and
-- that send's answer comes back (dup_message_id, dup_sequence; id NULL). Concurrent sends of
-- one id on any nodes: the second waits on the first's row, then finds it taken (or takes it
-- if the first rolled back); exactly one pushes.
CREATE FUNCTION lmq.push_dedup(q bigint, qname text, d_key text, d_sent float8, d_message_id text,
                               d_sequence text, horizon float8,
                               item bytea, n integer, p_retry bigint, t float8, p_ext boolean,
                               p_expires float8, p_interval float8, p_priority smallint, p_once boolean,
                               p_hard boolean, p_grp text, now_ float8,
                               OUT id uuid, OUT dup_sent float8, OUT dup_message_id text,
                               OUT dup_sequence text, OUT st_size bigint, OUT st_nbytes bigint,
                               OUT st_in_flight bigint, OUT st_first float8)
LANGUAGE plpgsql AS $$
DECLARE
    taken boolean;
BEGIN
    -- The queue's lock before the dedup row, whose foreign key locks the queue's row: a delete
    -- takes them in this order too (lmq.push takes the lock again, which it holds already).
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('lmq.queue:' || q, 0));
    INSERT INTO lmq.dedup AS d (queue_id, key, sent, message_id, sequence)
    VALUES (q, d_key, d_sent, d_message_id, d_sequence)
    ON CONFLICT (queue_id, key) DO UPDATE
        SET sent = EXCLUDED.sent, message_id = EXCLUDED.message_id, sequence = EXCLUDED.sequence
        WHERE d.sent <= horizon
    RETURNING true INTO taken;
    IF taken IS NULL THEN
        SELECT d.sent, d.message_id, d.sequence INTO dup_sent, dup_message_id, dup_sequence
        FROM lmq.dedup d WHERE d.queue_id = q AND d.key = d_key;
        @state(q);
        RETURN;
    END IF;
    SELECT p.id, p.st_size, p.st_nbytes, p.st_in_flight, p.st_first
    INTO id, st_size, st_nbytes, st_in_flight, st_first
    FROM lmq.push(q, item, n, p_retry, t, p_ext, p_expires, p_interval, p_priority, p_once, p_hard, p_grp, now_) p;
    -- Other nodes mirror the id (lmq_meta 'x:' as the store's own writes of ids).
    PERFORM pg_notify('lmq_meta', 'x:' || json_build_array(qname, d_key, d_sent, d_message_id, d_sequence)::text);
END
$$;
"""),
    ),
    (
        3,
        _expand("""
-- dequeue with SQS's rule for a deleted dead-letter queue: lmq.dequeue (migration 1), but the
-- dead-letter queue is named (dlq_name) and looked up in this transaction, never made again.
-- While no queue has that name, a record out of retries is delivered all the same (its retry
-- left at 0, its delivery count growing) and one past its expiry is dropped, as the embedded
-- store's hold does; once a queue of that name exists, the next delivery moves it there. The
-- 5-argument lmq.dequeue stays for nodes still running the previous version.
CREATE FUNCTION lmq.dequeue(q bigint, tmo float8, now_ float8, dlq bigint, dlq_retry bigint, dlq_name text,
                            OUT m lmq.message, OUT retention float8, OUT ndead integer,
                            OUT st_size bigint, OUT st_nbytes bigint,
                            OUT st_in_flight bigint, OUT st_first float8)
LANGUAGE plpgsql AS $$
DECLARE
    r lmq.message;
    expired boolean;
    deadline float8;
    nu uuid;
    nr bigint;
    reason text;
    origin text;
    level integer;
    -- Whether the dead-letter queue was looked for, and, with dlq_name, found missing.
    resolved boolean := false;
    holding boolean := false;
BEGIN
    ndead := 0;
    LOOP
        level := 256;
        LOOP
            SELECT max(x.priority) INTO level FROM lmq.message x
            WHERE x.queue_id = q AND x.priority > 0 AND x.priority < level AND NOT x.held;
            EXIT WHEN level IS NULL;
            SELECT * INTO r FROM lmq.message x
            WHERE x.queue_id = q AND x.priority = level AND NOT x.held AND x.ts <= now_
            ORDER BY x.ts, x.uuid LIMIT 1 FOR UPDATE SKIP LOCKED;
            EXIT WHEN FOUND;
        END LOOP;
        IF level IS NULL THEN
            SELECT * INTO r FROM lmq.message x
            WHERE x.queue_id = q AND NOT x.held AND x.ts <= now_
            ORDER BY x.ts, x.uuid LIMIT 1 FOR UPDATE SKIP LOCKED;
            EXIT WHEN NOT FOUND;
        END IF;
        expired := r.ext AND r.expires IS NOT NULL AND now_ >= r.expires;
        reason := NULL;
        IF expired AND r.hard THEN
            reason := 'drop';
        ELSIF expired AND (r.attempts > 0 OR r.retry <= 0) THEN
            reason := 'expired';
        ELSIF r.retry <= 0 THEN
            reason := 'retries';
        END IF;
        IF reason IS NOT NULL AND reason <> 'drop' AND NOT resolved AND (dlq IS NOT NULL OR dlq_name IS NOT NULL) THEN
            resolved := true;
            SELECT name INTO origin FROM lmq.queue WHERE id = q;
            IF dlq_name IS NOT NULL THEN
                SELECT lq.id INTO dlq FROM lmq.queue lq WHERE lq.name = dlq_name;
            END IF;
            IF dlq IS NOT NULL THEN
                -- As any write adding records to a queue: under its lock, the queue still there.
                PERFORM pg_advisory_xact_lock_shared(hashtextextended('lmq.queue:' || dlq, 0));
                IF NOT EXISTS (SELECT 1 FROM lmq.queue lq WHERE lq.id = dlq) THEN
                    IF dlq_name IS NULL THEN
                        RAISE foreign_key_violation USING MESSAGE = 'queue ' || dlq || ' was deleted';
                    END IF;
                    dlq := NULL;
                END IF;
            END IF;
            holding := dlq_name IS NOT NULL AND dlq IS NULL;
        END IF;
        IF holding AND (reason = 'retries' OR (reason = 'expired' AND r.attempts = 0)) THEN
            reason := NULL;  -- kept: delivered again
        END IF;
        IF reason IS NOT NULL THEN
            DELETE FROM lmq.message x WHERE x.queue_id = q AND x.uuid = r.uuid;
            @count(q; -1, -r.nbytes, CASE WHEN r.state = 1 THEN -1 ELSE 0 END);
            IF r.grp IS NOT NULL THEN
                PERFORM lmq.group_left(q, r.grp);
            END IF;
            IF dlq IS NOT NULL AND reason <> 'drop' AND NOT r.once THEN
                nu := gen_random_uuid();
                INSERT INTO lmq.message (queue_id, ts, uuid, state, compound, retry, content, nbytes, key,
                                         ext, priority, sent_at, dead_origin, dead_failures, dead_last_at, dead_reason)
                VALUES (dlq, now_, nu, 0, r.compound, dlq_retry + 1, r.content, r.nbytes, lmq.msg_key(nu),
                        true, r.priority, r.sent_at, origin, r.attempts, r.last_at, reason);
                @count(dlq; 1, r.nbytes, 0);
                PERFORM pg_notify('lmq_due', dlq::text || ':' || now_::text);
                ndead := ndead + 1;
            END IF;
            CONTINUE;
        END IF;
        nu := gen_random_uuid();
        -- A held record has no retry left: it stays at 0 (NULL, infinity, stays NULL).
        nr := CASE WHEN r.retry > 0 THEN r.retry - 1 ELSE r.retry END;
        IF r.ext THEN
            deadline := now_ + coalesce(r.interval, tmo);
            IF NOT r.hard AND (expired OR (r.expires IS NOT NULL AND deadline >= r.expires)) THEN
                nr := 0;
            END IF;
            UPDATE lmq.message x SET ts = deadline, uuid = nu, key = lmq.msg_key(nu), state = 1, retry = nr,
                again = false, attempts = x.attempts + 1, first_at = coalesce(x.first_at, now_), last_at = now_
            WHERE x.queue_id = q AND x.uuid = r.uuid RETURNING * INTO m;
        ELSE
            UPDATE lmq.message x SET ts = now_ + tmo, uuid = nu, key = lmq.msg_key(nu), state = 1, again = false,
                retry = nr
            WHERE x.queue_id = q AND x.uuid = r.uuid RETURNING * INTO m;
        END IF;
        IF r.state <> 1 THEN
            @count(q; 0, 0, 1);
        END IF;
        retention := now_ - r.ts;
        EXIT;
    END LOOP;
    @state(q);
END
$$;

-- dequeue_in_group: for a receive that holds prev (a record of group g in processing, its
-- deadline not passed: the group's head it has just taken, or the last record this function
-- gave it), the group's next record by seq, delivered as lmq.dequeue delivers it, when it is
-- due (one in processing under a deadline still to come is another receive's: the walk stops,
-- nothing is given past it). The records so taken stay held: when their deadlines
-- pass, only the head is delivered again, and they follow it in the same way. None for a
-- record out of retries or past its expiry: lmq.dequeue, which knows the dead-letter queue,
-- takes it once it is the head. Under the group's lock (as a grouped push and the promotion of
-- a head), and with prev locked: no other node delivers prev again meanwhile.
CREATE FUNCTION lmq.dequeue_in_group(q bigint, g text, prev uuid, tmo float8, now_ float8,
                                     OUT m lmq.message, OUT retention float8,
                                     OUT st_size bigint, OUT st_nbytes bigint,
                                     OUT st_in_flight bigint, OUT st_first float8)
LANGUAGE plpgsql AS $$
DECLARE
    r lmq.message;
    s bigint;
    deadline float8;
    nu uuid;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('lmq.group:' || q || ':' || g, 0));
    SELECT x.seq INTO s FROM lmq.message x
    WHERE x.queue_id = q AND x.uuid = prev AND x.grp = g AND x.state = 1 AND x.ts >= now_ FOR UPDATE;
    IF FOUND THEN
        SELECT * INTO r FROM lmq.message x
        WHERE x.queue_id = q AND x.grp = g AND x.held AND x.seq > s ORDER BY x.seq LIMIT 1 FOR UPDATE;
        -- Due as lmq.dequeue takes records: available, or in processing with its deadline come.
        IF FOUND AND r.ext AND r.ts <= now_
           AND (r.retry IS NULL OR r.retry > 0) AND (r.expires IS NULL OR now_ < r.expires) THEN
            nu := gen_random_uuid();
            deadline := now_ + coalesce(r.interval, tmo);
            UPDATE lmq.message x SET ts = deadline, uuid = nu, key = lmq.msg_key(nu), state = 1,
                retry = CASE WHEN NOT r.hard AND r.expires IS NOT NULL AND deadline >= r.expires THEN 0
                             ELSE x.retry - 1 END,
                again = false, attempts = x.attempts + 1, first_at = coalesce(x.first_at, now_), last_at = now_
            WHERE x.queue_id = q AND x.uuid = r.uuid RETURNING * INTO m;
            IF r.state <> 1 THEN
                @count(q; 0, 0, 1);
            END IF;
            retention := now_ - r.ts;
        END IF;
    END IF;
    @state(q);
END
$$;
"""),
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
