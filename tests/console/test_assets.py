"""The console's static files, checked without a browser.

There is no Node toolchain, so no JS linter or bundler stands between these files and a user:

- every file of ``pylmq/api/web/assets`` is served (its type is known to the server), matched by
  the ``package-data`` globs of pyproject.toml, and present in a wheel built from the checkout;
- index.html loads exactly one script, a module, and has no inline script or style and no
  ``on*``/``style`` attribute (the page's CSP forbids them, so they would fail only at run time);
- no JS file uses an HTML or code sink (innerHTML, document.write, eval, ...): the DOM is built
  through ``dom.h`` with text nodes only;
- every import in the JS is a relative ``./name.js`` naming an existing asset (the browser would
  fail only when the route needing it is opened).

Each checker is also run on a bad sample, so it is shown to catch what it looks for.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pylmq.api.web.server import load_assets

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "pylmq" / "api" / "web"
ASSETS = WEB / "assets"
ASSET_NAMES = sorted(p.name for p in ASSETS.iterdir() if p.is_file())
JS = [name for name in ASSET_NAMES if name.endswith(".js")]

# Strings first, so that "//" or "/*" inside a string literal is not taken for a comment.
_STRING_OR_COMMENT = re.compile(
    r"""("(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|`(?:\\.|[^`\\])*`)|//[^\n]*|/\*.*?\*/""", re.DOTALL
)
SINKS = {
    "innerHTML": re.compile(r"\binnerHTML\b"),
    "outerHTML": re.compile(r"\bouterHTML\b"),
    "insertAdjacentHTML": re.compile(r"\binsertAdjacentHTML\b"),
    "document.write": re.compile(r"\bdocument\s*\.\s*write(?:ln)?\b"),
    "eval": re.compile(r"(?<![\w$.])eval\s*\("),
    "new Function": re.compile(r"\bnew\s+Function\b|(?<![\w$.])Function\s*\("),
    # A handler or style attribute by its literal name ("open", of <dialog>, is no handler).
    "setAttribute on*/style": re.compile(
        r"""\bsetAttribute(?:NS)?\s*\([^,)]*?["'`](?!open["'`])(?:on\w+|style)["'`]""", re.IGNORECASE
    ),
    "setTimeout/setInterval with code": re.compile(r"""\bset(?:Timeout|Interval)\s*\(\s*["'`]"""),
}
# Static and dynamic imports and re-exports: the specifier of each.
IMPORT_SPEC = re.compile(
    r"""\bimport\s*\(\s*(["'`])([^"'`]*)\1"""  # import("./x.js")
    r"""|\b(?:import|export)\b[^;"'`()]*?\bfrom\s*(["'])([^"']*)\3"""  # import {a} from "./x.js"
    r"""|\bimport\s*(["'])([^"']*)\5"""  # import "./x.js"
)


def strip_comments(source: str) -> str:
    """The JS source with its comments blanked (string literals kept)."""
    return _STRING_OR_COMMENT.sub(lambda m: m.group(1) or " ", source)


def sinks_in(source: str) -> list[str]:
    """Names of the forbidden sinks used in ``source`` (comments ignored)."""
    code = strip_comments(source)
    return [name for name, pattern in SINKS.items() if pattern.search(code)]


def import_specifiers(source: str) -> list[str]:
    """Every module specifier the JS ``source`` imports or re-exports from (comments ignored)."""
    found = []
    for m in IMPORT_SPEC.finditer(strip_comments(source)):
        found.append(m.group(2) if m.group(2) is not None else m.group(4) if m.group(4) is not None else m.group(6))
    return found


def unresolved_imports(source: str, names: set[str]) -> list[str]:
    """Specifiers that are not ``./<asset>`` for an asset in ``names`` (flat folder, no bare or
    absolute specifiers: no build step resolves them, and the CSP allows only 'self')."""
    return [s for s in import_specifiers(source) if not (s.startswith("./") and s[2:] in names)]


class _PageScan(HTMLParser):
    """What the page loads and every inline script, style or handler it has."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.scripts: list[dict[str, str | None]] = []
        self.problems: list[str] = []
        self.references: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        for name, _ in attrs:
            if name.startswith("on"):
                self.problems.append(f"<{tag} {name}=...> (inline handler)")
            if name == "style":
                self.problems.append(f"<{tag} style=...> (inline style)")
        if tag == "style":
            self.problems.append("<style> element (inline style)")
        if tag == "script":
            self.scripts.append(attributes)
            self._in_script = True
            if not attributes.get("src"):
                self.problems.append("<script> without src (inline script)")
        for name in ("src", "href"):
            value = attributes.get(name)
            if value and not value.startswith("#"):
                self.references.append(value)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.problems.append("<script> with inline content")


def scan_page(html: str) -> _PageScan:
    scan = _PageScan()
    scan.feed(html)
    scan.close()
    return scan


def page_problems(html: str, names: set[str]) -> list[str]:
    """Why ``html`` is not a CSP-clean page loading one module script from the assets."""
    scan = scan_page(html)
    problems = list(scan.problems)
    if len(scan.scripts) != 1 or scan.scripts[0].get("type") != "module":
        problems.append(f"want exactly one <script type=module>, got {scan.scripts}")
    problems += [f"{ref!r} names no asset" for ref in scan.references if ref not in names]
    return problems


# -- the checkers catch what they look for -----------------------------------------------------


@pytest.mark.parametrize(
    ("source", "sink"),
    [
        ("el.innerHTML = x;", "innerHTML"),
        ("p.outerHTML=q", "outerHTML"),
        ("el.insertAdjacentHTML('beforeend', s)", "insertAdjacentHTML"),
        ("document.write(s)", "document.write"),
        ("document . writeln(s)", "document.write"),
        ("const f = eval(code);", "eval"),
        ("window.eval (code)", None),  # a method named eval on some object is not the global
        ("new Function('a', body)", "new Function"),
        ("const f = Function(body)", "new Function"),
        ("el.setAttribute('onclick', js)", "setAttribute on*/style"),
        ('el.setAttribute("STYLE", css)', "setAttribute on*/style"),
        ("el.setAttribute('data-state', 'ok')", None),
        ("dialog.setAttribute('open', '')", None),
        ("el.setAttribute('onload', js)", "setAttribute on*/style"),
        ("setTimeout('tick()', 10)", "setTimeout/setInterval with code"),
        ("setTimeout(tick, 10)", None),
        ("// never innerHTML here\n/* nor eval(x) */ const a = 1;", None),
        ("const s = '// not a comment'; el.innerHTML = s;", "innerHTML"),
        ("const evaluate = 1; retrieval(x);", None),
    ],
)
def test_sink_checker(source: str, sink: str | None) -> None:
    assert sinks_in(source) == ([sink] if sink else [])


def test_import_checker() -> None:
    source = (
        'import { a } from "./a.js";\nimport {\n  b,\n  c,\n} from "./b.js";\nimport "./side.js";\n'
        'export { d } from "./d.js";\nconst m = await import("./lazy.js");\n'
        '// import { x } from "./commented.js";\nimport { e } from "https://cdn.example/e.js";\n'
        'import f from "f";\nimport { g } from "./sub/g.js";\n'
    )
    assert import_specifiers(source) == [
        "./a.js", "./b.js", "./side.js", "./d.js", "./lazy.js", "https://cdn.example/e.js", "f", "./sub/g.js",
    ]  # fmt: skip
    names = {"a.js", "b.js", "side.js", "d.js", "lazy.js"}
    assert unresolved_imports(source, names) == ["https://cdn.example/e.js", "f", "./sub/g.js"]


@pytest.mark.parametrize(
    ("html", "problem"),
    [
        ('<script type="module" src="app.js"></script><script>alert(1)</script>', "inline"),
        ('<script type="module" src="app.js"></script><div onclick="x()"></div>', "inline handler"),
        ('<script type="module" src="app.js"></script><p style="color:red"></p>', "inline style"),
        ('<script type="module" src="app.js"></script><style>p{}</style>', "inline style"),
        ('<script src="app.js"></script>', "exactly one"),
        ('<script type="module" src="app.js"></script><script type="module" src="app.js"></script>', "exactly one"),
        ('<script type="module" src="gone.js"></script>', "names no asset"),
        ('<script type="module" src="app.js"></script><link rel="stylesheet" href="//cdn/x.css">', "names no asset"),
    ],
)
def test_page_checker(html: str, problem: str) -> None:
    problems = page_problems(html, {"app.js"})
    assert any(problem in p for p in problems), problems


# -- the shipped assets ------------------------------------------------------------------------


def test_assets_exist() -> None:
    assert "index.html" in ASSET_NAMES and "app.js" in ASSET_NAMES, ASSET_NAMES


def test_every_asset_is_served() -> None:
    """A file of a type the server does not know would be skipped silently: a 404 in the page."""
    assert sorted(load_assets()) == ASSET_NAMES


def test_every_asset_is_package_data() -> None:
    with (ROOT / "pyproject.toml").open("rb") as f:
        globs = tomllib.load(f)["tool"]["setuptools"]["package-data"]["pylmq.api.web"]
    missed = [n for n in ASSET_NAMES if not any(fnmatch.fnmatchcase(f"assets/{n}", g) for g in globs)]
    assert not missed, f"not matched by package-data {globs}: {missed}"


# Offline: no index, and the installed setuptools builds (no isolated build environment).
PIP_WHEEL = (sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q")


def test_every_asset_is_in_a_built_wheel(tmp_path: Path) -> None:
    """Build a wheel of a copy of the checkout (no build/ or egg-info left in it), offline, and
    find each asset at its package path, byte for byte."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "pyspark_lmq.py"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "pylmq", src / "pylmq", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path / "dist"
    done = subprocess.run(
        [*PIP_WHEEL, "--wheel-dir", str(dist), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = dist.glob("pylmq-*.whl")
    with zipfile.ZipFile(wheel) as z:
        shipped = {n.removeprefix("pylmq/api/web/assets/"): z.read(n) for n in z.namelist() if "/web/assets/" in n}
    assert sorted(shipped) == ASSET_NAMES
    changed = [n for n in ASSET_NAMES if shipped[n] != (ASSETS / n).read_bytes()]
    assert not changed, changed


def test_index_html_is_one_module_script_and_nothing_inline() -> None:
    html = (ASSETS / "index.html").read_text(encoding="utf-8")
    assert page_problems(html, set(ASSET_NAMES)) == []
    assert scan_page(html).scripts == [{"type": "module", "src": "app.js"}]


@pytest.mark.parametrize("name", JS)
def test_js_uses_no_html_or_code_sink(name: str) -> None:
    assert sinks_in((ASSETS / name).read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("name", JS)
def test_js_imports_resolve_to_assets(name: str) -> None:
    source = (ASSETS / name).read_text(encoding="utf-8")
    assert unresolved_imports(source, set(ASSET_NAMES)) == []


def test_every_js_module_is_reachable_from_app_js() -> None:
    """Each module is imported (statically or dynamically) from the page's entry: a module no
    route imports is dead weight, or a page its author forgot to register."""
    seen, todo = set(), ["app.js"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [s[2:] for s in import_specifiers((ASSETS / name).read_text(encoding="utf-8"))]
    assert sorted(set(JS) - seen) == []
