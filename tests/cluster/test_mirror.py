"""The mirror (sans-IO): Mnesia table events and scans in, LMQ's tables out, with no Erlang."""

from __future__ import annotations

from pylmq.cluster.mirror import LMQ_INFO, QUEUE_INFO, SCHEMA, VIRTUAL_QUEUES, Mirror, virtual_from_row
from pylmq.cluster.records import message_from_term, message_to_term, props_from_term, props_to_term
from pylmq.core.message import State, StoredMessage, StoredMessageType, msg_key
from pylmq.erlang.terms import Atom, Pid

A = Atom
Q = A("q1")
EV = A("mnesia_table_event")


class Heard:
    def __init__(self) -> None:
        self.log: list[tuple[str, object]] = []

    def on_queue_created(self, name: str) -> None:
        self.log.append(("created", name))

    def on_queue_props(self, name: str) -> None:
        self.log.append(("props", name))

    def on_queue_deleted(self, name: str) -> None:
        self.log.append(("deleted", name))

    def on_messages(self, name: str) -> None:
        self.log.append(("messages", name))

    def on_defaults(self) -> None:
        self.log.append(("defaults", None))

    def on_virtual(self) -> None:
        self.log.append(("virtual", None))

    def on_table_created(self, table: Atom) -> None:
        self.log.append(("table", table.name))


def row(ts: float, uuid: bytes, state: str = "available", tag: Atom = Q) -> tuple[object, ...]:
    return (tag, (ts, uuid), A(state), A("normal"), 3, ([(b"content-type", b"text/plain")], b"body"))


def write(record: tuple[object, ...]) -> tuple[object, ...]:
    return (EV, (A("write"), record, (A("tid"), 1, None)))


def delete(table: Atom, key: object) -> tuple[object, ...]:
    return (EV, (A("delete"), (table, key), (A("tid"), 1, None)))


def loaded(rows: list[tuple[object, ...]]) -> Mirror:
    m = Mirror(Heard())
    m.begin(Q)
    m.load(Q, rows)
    return m


def test_a_record_survives_the_round_trip_through_its_erlang_term() -> None:
    msg = StoredMessage((1.5, b"u" * 16), State.PROCESSING, StoredMessageType.COMPOUND, None, [((), b"a"), ((), b"b")])
    assert message_from_term(message_to_term(msg)) == msg


def test_props_cross_as_lmqs_proplist_with_accum_in_milliseconds() -> None:
    raw = {"accum": 0.5, "retry": None, "timeout": 30.0}
    assert props_to_term(raw) == [(A("accum"), 500), (A("retry"), A("infinity")), (A("timeout"), 30)]
    assert props_from_term(props_to_term(raw)) == raw


def test_the_first_record_is_the_one_with_the_lowest_id() -> None:
    m = loaded([row(3.0, b"c" * 16), row(1.0, b"a" * 16), row(2.0, b"b" * 16)])
    t = m.table("q1")
    assert t is not None and t.first() is not None and t.first().id == (1.0, b"a" * 16)  # type: ignore[union-attr]
    assert (len(t), t.waittime(0.5), t.waittime(5.0)) == (3, 0.5, 0.0)


def test_a_dequeue_seen_as_delete_then_write_rekeys_the_record() -> None:
    m = loaded([row(1.0, b"a" * 16)])
    m.apply(delete(Q, (1.0, b"a" * 16)))
    m.apply(write(row(31.0, b"n" * 16, "processing")))
    t = m.table("q1")
    assert t is not None and [x.id for x in t.messages()] == [(31.0, b"n" * 16)]


def test_events_recorded_while_loading_are_replayed_over_the_scan() -> None:
    m = Mirror(Heard())
    m.begin(Q)
    m.apply(write(row(1.0, b"a" * 16)))  # before the scan, and in it
    m.apply(delete(Q, (1.0, b"a" * 16)))  # after the scan was taken
    m.apply(write(row(2.0, b"b" * 16)))  # after the scan was taken
    m.load(Q, [row(1.0, b"a" * 16)])
    t = m.table("q1")
    assert t is not None and [x.id for x in t.messages()] == [(2.0, b"b" * 16)]


def test_a_scan_of_a_table_dropped_meanwhile_is_ignored() -> None:
    m = Mirror(Heard())
    m.begin(Q)
    m.drop(Q)
    m.load(Q, [row(1.0, b"a" * 16)])
    assert m.table("q1") is None


def test_a_new_table_in_the_schema_is_announced_once_and_begins_loading() -> None:
    heard = Heard()
    m = Mirror(heard)
    schema_row = (SCHEMA, A("q2"), [(A("record_name"), A("message"))])
    m.apply(write(schema_row))
    m.apply(write(schema_row))  # create_table writes its schema row twice
    assert [e for e in heard.log if e[0] == "table"] == [("table", "q2")]
    assert A("q2") in m.loading()


def test_queue_info_events_create_change_and_delete_queues() -> None:
    heard = Heard()
    m = Mirror(heard)
    m.apply(write((QUEUE_INFO, Q, [])))
    m.apply(write((QUEUE_INFO, Q, [(A("retry"), 5)])))
    m.apply(delete(QUEUE_INFO, Q))
    assert heard.log == [("created", "q1"), ("props", "q1"), ("deleted", "q1")]
    assert m.queue_props == {}


def test_the_default_list_comes_from_lmq_info() -> None:
    m = Mirror(Heard())
    m.apply(write((LMQ_INFO, A("default_props"), [(b"^a", [(A("timeout"), 5)]), ([94, 98], [])])))
    assert m.defaults == [("^a", {"timeout": 5.0}), ("^b", {})]


def test_non_ascii_queue_names_map_to_lmqs_latin1_atoms() -> None:
    from pylmq.cluster.records import name_from_atom, name_to_atom

    atom = name_to_atom("キュー")
    assert (atom.name, name_from_atom(atom)) == ("キュー".encode().decode("latin-1"), "キュー")


def vrow(name: bytes, queues: list[bytes]) -> tuple[object, ...]:
    return (LMQ_INFO, (VIRTUAL_QUEUES, name), queues)


def test_virtual_queues_come_from_their_lmq_info_rows_one_per_name() -> None:
    heard = Heard()
    m = Mirror(heard)
    m.begin(LMQ_INFO)
    m.apply(write(vrow(b"v2", [b"c"])))  # during the scan: replayed over it
    m.load(LMQ_INFO, [vrow(b"v1", [b"a", b"b"]), (LMQ_INFO, A("default_props"), []), (LMQ_INFO, A("other"), 1)])
    assert m.virtual == {"v1": ["a", "b"], "v2": ["c"]}
    heard.log.clear()
    m.apply(write(vrow(b"v1", [b"d"])))
    m.apply(write(vrow(b"v1", [b"d"])))  # the same binding again: no news
    m.apply(delete(LMQ_INFO, (VIRTUAL_QUEUES, b"v2")))
    assert m.virtual == {"v1": ["d"]}
    assert heard.log == [("virtual", None), ("virtual", None)]
    # Rows of other shapes under other keys are not virtual queues.
    assert virtual_from_row((LMQ_INFO, (A("other"), b"v"), [b"a"])) is None
    assert virtual_from_row((LMQ_INFO, (VIRTUAL_QUEUES, b"v"), b"a")) is None


def test_find_delivery_resolves_the_key_of_one_processing_row_only() -> None:
    u1, u2, u3 = b"\x01" * 16, b"\x02" * 16, b"\x03" * 8 + b"\x02" * 8  # u3's key is u2's
    m = loaded([row(1.0, u1, "processing"), row(2.0, u2, "available")])
    t = m.tables["q1"]
    assert t.find_delivery(msg_key(u1)) == u1
    assert t.find_delivery(msg_key(u2)) is None  # available: no delivery
    m.apply(delete(Q, (2.0, u2)))
    m.apply(write(row(9.0, u2, "processing")))  # dequeued: processing under a deadline
    assert t.find_delivery(msg_key(u2)) == u2
    m.apply(write(row(8.0, u3, "processing")))
    assert t.find_delivery(msg_key(u2)) is None, "an ambiguous key settles nothing"
    m.apply(delete(Q, (8.0, u3)))
    assert t.find_delivery(msg_key(u2)) == u2
    m.apply(delete(Q, (1.0, u1)))
    assert t.find_delivery(msg_key(u1)) is None


def test_a_page_is_the_rows_after_the_cursor_in_id_order() -> None:
    m = loaded([row(float(i % 5), bytes([i]) * 16) for i in range(10)])
    t = m.tables["q1"]
    ids = [msg.id for msg in t.messages()]
    assert [msg.id for msg in t.page(None, 3)] == ids[:3]
    assert [msg.id for msg in t.page(ids[2], 4)] == ids[3:7]
    assert t.page(ids[-1], 4) == []


def test_writes_by_transactions_of_other_nodes_are_dated_per_queue_and_this_nodes_are_not() -> None:
    now = [100.0]
    ours, theirs = object(), Pid(Atom("lmq1@host"), 40, 0, 1)
    m = Mirror(Heard(), clock=lambda: now[0])
    m.begin(Q)
    m.load(Q, [])
    m.own_writer = lambda pid: pid is ours

    def by(coordinator: object, event: tuple[object, ...]) -> tuple[object, ...]:
        inner = event[1]
        assert isinstance(inner, tuple)
        return (EV, (inner[0], inner[1], (A("tid"), 7, coordinator)))

    m.apply(by(ours, write(row(1.0, b"a" * 16))))
    m.apply(by(ours, delete(Q, (1.0, b"a" * 16))))
    assert m.foreign_writes == {}, "this node's runners' writes are not another node's"
    now[0] = 105.0
    m.apply(by(theirs, write(row(2.0, b"b" * 16))))
    assert m.foreign_writes == {"q1": 105.0}
    assert m.foreign_nodes == {"q1": "lmq1@host"}, "the node whose process wrote"
    now[0] = 107.0
    elsewhere = Pid(Atom("lmq2@host"), 41, 0, 1)
    m.apply((EV, (A("delete"), (Q, (2.0, b"b" * 16)), (A("dirty"), elsewhere))))
    assert m.foreign_writes == {"q1": 107.0}, "a dirty write is nobody's transaction: another node's"
    assert m.foreign_nodes == {}, "a dirty write names no coordinator: no node to go to"
    now[0] = 109.0
    m.apply(by(ours, write(row(3.0, b"c" * 16))))
    assert m.foreign_writes == {"q1": 107.0}
    m.drop(Q)
    assert m.foreign_writes == {} and m.foreign_nodes == {}
