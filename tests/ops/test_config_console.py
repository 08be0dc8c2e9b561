"""app.config's console switch and http_auth (tokens, protect) as the node gets them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pylmq.errors import ConfigError
from tests.config_helpers import options_from

TOKEN = "abcdefghijklmnop-0123"


def test_defaults_are_console_on_and_no_credential(tmp_path: Path) -> None:
    opts = options_from(tmp_path)
    assert (opts.console, opts.http_tokens, opts.http_protect) == (True, (), "mutating")


def test_console_can_be_turned_off(tmp_path: Path) -> None:
    assert options_from(tmp_path, "{console, false}").console is False


def test_http_auth_tokens_and_protect(tmp_path: Path) -> None:
    opts = options_from(tmp_path, f'{{http_auth, [{{tokens, ["{TOKEN}", <<"{TOKEN}x==">>]}}, {{protect, all}}]}}')
    assert (opts.http_tokens, opts.http_protect) == ((TOKEN, TOKEN + "x=="), "all")
    assert TOKEN not in repr(opts)
    opts = options_from(tmp_path, f'{{http_auth, [{{tokens, ["{TOKEN}"]}}]}}')
    assert (opts.http_tokens, opts.http_protect) == ((TOKEN,), "mutating")


@pytest.mark.parametrize(
    ("section", "says"),
    [
        ('{http_auth, [{tokens, ["short-secret"]}]}', "token 1 must be 16 to 256"),
        ('{http_auth, [{tokens, ["' + "ok" * 8 + '", "has space in it 0123"]}]}', "token 2 must be"),
        ('{http_auth, [{tokens, ["' + "x" * 257 + '"]}]}', "token 1 must be"),
        ("{http_auth, [{tokens, []}]}", "non-empty list"),
        ("{http_auth, [{tokens, [secretatom12345678]}]}", "token 1 is not a string"),
        ("{http_auth, [{protect, all}]}", "no tokens given"),
        ('{http_auth, [{tokens, ["' + TOKEN + '"]}, {protect, reads}]}', "protect: expected mutating or all"),
        ('{http_auth, [{tokens, ["' + TOKEN + '"]}, {tokenz, 1}]}', "unknown key"),
        ('{http_auth, "' + TOKEN + '"}', "expected [{tokens"),
    ],
)
def test_bad_http_auth_is_refused_without_quoting_tokens(tmp_path: Path, section: str, says: str) -> None:
    with pytest.raises(ConfigError) as e:
        options_from(tmp_path, section)
    assert says in str(e.value)
    for secret in ("short-secret", "has space in it", "secretatom", TOKEN, "x" * 20):
        assert secret not in str(e.value)
