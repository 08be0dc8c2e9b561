"""app.config's virtual_queues: read into Settings, bad shapes refused naming the entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from pylmq.config import load_settings
from pylmq.core.manager import MAX_VIRTUAL_MEMBERS
from pylmq.errors import ConfigError


def _load(tmp_path: Path, text: str) -> dict[str, tuple[str, ...]]:
    path = tmp_path / "app.config"
    path.write_text(text)
    return dict(load_settings(None, path, {}).virtual_queues)


@pytest.mark.parametrize("app", ["pylmq", "lmq"])
def test_virtual_queues_are_read_from_either_section(tmp_path: Path, app: str) -> None:
    text = f'[{{{app}, [{{virtual_queues, [{{<<"fan">>, [<<"a">>, "b"]}}, {{<<"one">>, [<<"c">>]}}]}}]}}].'
    assert _load(tmp_path, text) == {"fan": ("a", "b"), "one": ("c",)}


def test_no_virtual_queues_by_default(tmp_path: Path) -> None:
    assert _load(tmp_path, "[{pylmq, [{store, memory}]}].") == {}


def test_utf8_names_are_kept(tmp_path: Path) -> None:
    text = '[{pylmq, [{virtual_queues, [{<<"v"/utf8>>, [<<"caf\\x{e9}"/utf8>>]}]}]}].'
    assert _load(tmp_path, text) == {"v": ("café",)}


MANY = ", ".join(f'<<"q{i}">>' for i in range(MAX_VIRTUAL_MEMBERS + 1))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("fan", r"virtual_queues: expected \[\{<<\"virtual\">>"),
        ('[{<<"v">>, <<"a">>}]', r"virtual_queues: expected \{<<\"virtual\">>"),
        ('[{<<"v">>}]', r"virtual_queues: expected \{<<\"virtual\">>"),
        ('[{v, [<<"a">>]}]', r"virtual_queues: a queue name must be a binary"),
        ('[{<<"v">>, [a]}]', r"virtual_queues 'v': a queue name must be a binary"),
        ('[{<<"v">>, [<<"">>]}]', r"virtual_queues 'v': a non-empty queue name is required"),
        ('[{<<"v">>, []}]', r"virtual_queues 'v': a virtual queue binds 1 to 64 queues, got 0"),
        (f'[{{<<"v">>, [{MANY}]}}]', r"virtual_queues 'v': a virtual queue binds 1 to 64 queues, got 65"),
        ('[{<<"v">>, [<<"a">>, <<"a">>]}]', r"virtual_queues 'v': a queue is bound twice"),
        ('[{<<"v">>, [<<"a">>]}, {<<"v">>, [<<"b">>]}]', r"virtual_queues 'v': the virtual queue is named twice"),
        ('[{<<"v">>, [<<"w">>]}, {<<"w">>, [<<"b">>]}]', r"virtual_queues 'v': binds the virtual queue 'w'"),
        ('[{<<"v">>, [<<"schema">>]}]', r"virtual_queues 'v': 'schema' is reserved"),
    ],
)
def test_bad_shapes_name_the_entry(tmp_path: Path, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, f"[{{pylmq, [{{virtual_queues, {value}}}]}}].")
