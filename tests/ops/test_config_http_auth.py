"""http_auth's token_file: one token a line, owner-only like the cookie file, and no error or
repr ever quoting a token (a config error is printed and logged)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pylmq.config.settings import MAX_TOKEN_FILE
from pylmq.errors import ConfigError
from tests.config_helpers import options_from

TOKEN = "abcdefghijklmnop-0123"
FILE_TOKEN = "Zm9vYmFyYmF6cXV4LXRva2Vu=="
SECOND = "second.token~0123456789"


def token_file(tmp_path: Path, text: str | bytes, mode: int = 0o600) -> Path:
    path = tmp_path / "http.token"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    path.chmod(mode)
    return path


def section(path: Path, tokens: str = "") -> str:
    extra = f'{{tokens, ["{tokens}"]}}, ' if tokens else ""
    return f'{{http_auth, [{extra}{{token_file, "{path}"}}]}}'


def refusal(tmp_path: Path, pylmq_section: str) -> str:
    with pytest.raises(ConfigError) as e:
        options_from(tmp_path, pylmq_section)
    return str(e.value)


def test_a_token_file_holds_one_token_a_line_with_comments_and_blanks(tmp_path: Path) -> None:
    path = token_file(tmp_path, f"# rotated 2026-11\n\n{FILE_TOKEN}\n  {SECOND}  \r\n")
    opts = options_from(tmp_path, section(path))
    assert (opts.http_tokens, opts.http_protect) == ((FILE_TOKEN, SECOND), "mutating")
    assert FILE_TOKEN not in repr(opts)


def test_token_file_adds_to_the_listed_tokens_once_each(tmp_path: Path) -> None:
    path = token_file(tmp_path, f"{FILE_TOKEN}\n{TOKEN}\n")
    assert options_from(tmp_path, section(path, TOKEN)).http_tokens == (TOKEN, FILE_TOKEN)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o660, 0o644])
def test_a_token_file_others_may_read_is_refused(tmp_path: Path, mode: int) -> None:
    path = token_file(tmp_path, FILE_TOKEN + "\n", mode)
    says = refusal(tmp_path, section(path))
    assert "must be accessible by its owner only (chmod 600)" in says
    assert FILE_TOKEN not in says


def test_a_missing_token_file_is_refused_not_ignored(tmp_path: Path) -> None:
    says = refusal(tmp_path, section(tmp_path / "absent.token"))
    assert "cannot read token file" in says and "No such file" in says


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("# only a comment\n\n", "holds no token"),
        (f"{FILE_TOKEN}\nshort-one\n", "line 2: must be 16 to 256"),
        (f"{FILE_TOKEN} {SECOND}\n", "line 1: must be 16 to 256"),
        (("é" * 20 + "\n").encode(), "tokens are ASCII"),
        (b"x" * (MAX_TOKEN_FILE + 1), "not a token file"),
    ],
)
def test_a_bad_token_file_is_refused_without_quoting_it(tmp_path: Path, text: str | bytes, says: str) -> None:
    path = token_file(tmp_path, text)
    message = refusal(tmp_path, section(path))
    assert says in message
    for secret in (FILE_TOKEN, SECOND, "short-one", "é" * 4, "x" * 20):
        assert secret not in message


def test_a_token_file_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.token"
    os.mkfifo(fifo, 0o600)
    assert "is not a regular file" in refusal(tmp_path, section(fifo))
    (tmp_path / "dir.token").mkdir(mode=0o700)
    assert "Is a directory" in refusal(tmp_path, section(tmp_path / "dir.token"))
