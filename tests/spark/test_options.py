"""Options, rows and push columns of the lmq data source: pure code, no Spark session."""

from __future__ import annotations

import pickle

import msgpack
import pytest

from tests.spark.spark_helpers import NO_PYSPARK

pytest.importorskip("pyspark", reason=NO_PYSPARK)

from pylmq.client import Message, Part, RpcMessage
from pylmq.errors import BadRequest
from pylmq.spark import read_options, write_options
from pylmq.spark._rows import Push, message_row, push_columns, row_push

URL = "http://127.0.0.1:9980"


def test_url_is_required() -> None:
    with pytest.raises(BadRequest, match="'url' is required"):
        read_options({"queue": "q"})


def test_several_urls_are_kept_in_order() -> None:
    opts = read_options({"url": "http://a:1, http://b:2", "queue": "q"})
    assert opts.urls == ("http://a:1", "http://b:2")
    assert opts.api == "http"


def test_rpc_urls_select_msgpack_rpc() -> None:
    opts = read_options({"url": "rpc://127.0.0.1:18800,msgpack-rpc://h:1", "queue": "q"})
    assert (opts.api, opts.urls) == ("rpc", ("127.0.0.1:18800", "h:1"))


def test_mixed_schemes_are_refused() -> None:
    with pytest.raises(BadRequest, match="mixes HTTP and MessagePack-RPC"):
        read_options({"url": "http://a:1,rpc://b:2", "queue": "q"})


def test_bad_url_is_refused_on_the_driver() -> None:
    with pytest.raises(BadRequest):
        read_options({"url": "ftp://a:1", "queue": "q"})


def test_read_needs_queue_or_qre() -> None:
    with pytest.raises(BadRequest, match=r"'queue'.*'qre'"):
        read_options({"url": URL})


def test_queue_and_qre_exclude_each_other() -> None:
    with pytest.raises(BadRequest, match="exclude each other"):
        read_options({"url": URL, "queue": "q", "qre": "^q"})


def test_option_names_are_case_insensitive() -> None:
    opts = read_options({"URL": URL, "Queue": "q", "MAXMESSAGES": "7", "numpartitions": "3"})
    assert (opts.queue, opts.max_messages, opts.num_partitions) == ("q", 7, 3)


@pytest.mark.parametrize(("key", "value"), [("maxMessages", "0"), ("maxMessages", "ten"), ("pipeline", "-1")])
def test_counts_must_be_positive_integers(key: str, value: str) -> None:
    with pytest.raises(BadRequest, match=f"'{key}' must be a positive integer, got '{value}'"):
        read_options({"url": URL, "queue": "q", key: value})


@pytest.mark.parametrize("value", ["-1", "nan", "soon"])
def test_timeout_must_be_seconds(value: str) -> None:
    with pytest.raises(BadRequest, match="'timeout'"):
        read_options({"url": URL, "queue": "q", "timeout": value})


def test_unknown_option_is_named() -> None:
    with pytest.raises(BadRequest, match=r"unknown lmq option.*maxmesages"):
        read_options({"url": URL, "queue": "q", "maxMesages": "5"})


def test_ack_on_accepts_trigger_or_commit() -> None:
    assert read_options({"url": URL, "queue": "q", "ackOn": "commit"}, stream=True).ack_on == "commit"
    with pytest.raises(BadRequest, match="'ackOn'"):
        read_options({"url": URL, "queue": "q", "ackOn": "never"}, stream=True)


def test_stream_defaults_wait_for_messages_batch_defaults_do_not() -> None:
    assert read_options({"url": URL, "queue": "q"}).timeout == 0.0
    assert read_options({"url": URL, "queue": "q"}, stream=True).timeout == 1.0


def test_options_survive_pickling() -> None:
    opts = read_options({"url": URL, "queue": "q", "extendInterval": "2.5"}, stream=True)
    assert pickle.loads(pickle.dumps(opts)) == opts


def test_write_without_target_is_allowed_here_and_checked_against_columns() -> None:
    opts = write_options({"url": URL})
    with pytest.raises(BadRequest, match="needs option 'queue', option 'qre' or a 'queue' column"):
        push_columns([("body", "binary")], api=opts.api, default_queue=None, qre=None)


# -- rows ---------------------------------------------------------------------------------------


def test_normal_http_message_row() -> None:
    m = Message("q", "id-1", "normal", 3, "text/plain", b"hi")
    assert message_row(m) == ("q", "id-1", "normal", 3, "text/plain", b"hi", None)


def test_compound_http_message_row_has_parts_and_no_body() -> None:
    parts = (Part({"content-type": "a/b"}, b"1"), Part({}, b"2"))
    m = Message("q", "id-2", "compound", None, "application/x-msgpack", b"raw", parts)
    assert message_row(m) == (
        "q",
        "id-2",
        "compound",
        None,
        None,
        None,
        [("a/b", b"1"), ("application/octet-stream", b"2")],
    )


def test_rpc_values_become_bodies() -> None:
    assert message_row(RpcMessage("q", "i", "normal", 1, b"\x00b"))[4:6] == ("application/octet-stream", b"\x00b")
    assert message_row(RpcMessage("q", "i", "normal", 1, "héllo"))[4:6] == (
        "text/plain; charset=utf-8",
        "héllo".encode(),
    )
    assert message_row(RpcMessage("q", "i", "normal", 1, {"k": [1, 2]}))[4:6] == (
        "application/x-msgpack",
        msgpack.packb({"k": [1, 2]}),
    )


def test_rpc_compound_values_become_parts() -> None:
    row = message_row(RpcMessage("q", "i", "compound", 0, [b"a", "b"]))
    assert row[6] == [("application/octet-stream", b"a"), ("text/plain; charset=utf-8", b"b")]


# -- push columns -------------------------------------------------------------------------------


def test_extra_columns_are_refused_by_name() -> None:
    with pytest.raises(BadRequest, match="select away key, n"):
        push_columns([("key", "string"), ("body", "string"), ("n", "int")], api="http", default_queue="q", qre=None)


def test_body_must_be_binary_or_string() -> None:
    with pytest.raises(BadRequest, match="'body' must be binary or string, got int"):
        push_columns([("body", "int")], api="http", default_queue="q", qre=None)


def test_content_type_column_is_refused_over_rpc() -> None:
    with pytest.raises(BadRequest, match="application/x-msgpack"):
        push_columns([("body", "binary"), ("content_type", "string")], api="rpc", default_queue="q", qre=None)


def test_queue_column_overrides_the_queue_option_row_by_row() -> None:
    cols = push_columns([("queue", "string"), ("body", "binary")], api="http", default_queue="dflt", qre=None)
    assert row_push(("q1", b"x"), cols, "dflt") == Push("q1", b"x", None)
    assert row_push((None, b"y"), cols, "dflt") == Push("dflt", b"y", None)


def test_string_bodies_are_pushed_as_utf8_text() -> None:
    cols = push_columns([("body", "string")], api="http", default_queue="q", qre=None)
    assert row_push(("é",), cols, "q") == Push("q", "é", "text/plain; charset=utf-8")


def test_null_body_is_a_clear_error() -> None:
    cols = push_columns([("body", "binary")], api="http", default_queue="q", qre=None)
    with pytest.raises(BadRequest, match="null 'body'"):
        row_push((None,), cols, "q")
