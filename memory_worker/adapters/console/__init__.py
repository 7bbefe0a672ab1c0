"""The console page: one set of static assets (plain ES modules and CSS, no build step) with two
homes — the standalone server at `/`, and the iii console through `memory::ui-content`.

`ASSETS` is the one table of what ships: each file's content type and where it goes. The standalone
server serves every asset under `/console/<name>` (and `index.html` at `/`); the iii console gets
the ones with a trigger type, under `memory/<name>` (`console:script` is the entry whose
`setup(host)` registers the page, `console:style` the scoped stylesheet, `console:module` the
modules it imports). Files are read once, at first use, from the installed package.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

from memory_worker.core.errors import InvalidInput

__all__ = [
    "ASSETS",
    "CONTENT_FUNCTION",
    "III_PREFIX",
    "Asset",
    "bus_assets",
    "read",
    "ui_content",
]

CONTENT_FUNCTION = "memory::ui-content"
III_PREFIX = "memory/"  # the first path segment becomes the console's `data-iii-ui` scope

_JS = "text/javascript; charset=utf-8"
_CSS = "text/css; charset=utf-8"
_HTML = "text/html; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Asset:
    name: str
    content_type: str
    trigger_type: str | None  # None: standalone only (the page shell, its entry, its page CSS)


ASSETS: dict[str, Asset] = {
    asset.name: asset
    for asset in (
        Asset("index.html", _HTML, None),
        Asset("standalone.css", _CSS, None),  # page-level rules the iii console forbids
        Asset("main.js", _JS, None),  # standalone entry: REST transport, live stream, token
        Asset("page.js", _JS, "console:script"),  # iii entry: `setup(host)`
        Asset("styles.css", _CSS, "console:style"),  # every rule under [data-iii-ui="memory"]
        Asset("app.js", _JS, "console:module"),
        Asset("dom.js", _JS, "console:module"),
        Asset("format.js", _JS, "console:module"),
        Asset("live.js", _JS, "console:module"),
        Asset("banks.js", _JS, "console:module"),
        Asset("banksettings.js", _JS, "console:module"),
        Asset("rules.js", _JS, "console:module"),
        Asset("memories.js", _JS, "console:module"),
        Asset("supersede.js", _JS, "console:module"),
        Asset("preview.js", _JS, "console:module"),
        Asset("settings.js", _JS, "console:module"),
        Asset("doctor.js", _JS, "console:module"),
        Asset("consolidation.js", _JS, "console:module"),
    )
}


@functools.cache
def read(name: str) -> str:
    """One asset's text, from the installed package. Raises `KeyError` for a name not in
    `ASSETS` (a request for anything else never touches the filesystem)."""
    asset = ASSETS[name]
    return resources.files(__package__).joinpath("static", asset.name).read_text("utf-8")


def bus_assets() -> list[tuple[str, str]]:
    """`(path, trigger_type)` for every asset the iii console loads."""
    return [(III_PREFIX + a.name, a.trigger_type) for a in ASSETS.values() if a.trigger_type]


def ui_content(path: str) -> dict[str, str]:
    """`memory::ui-content`: `{path}` → `{content, content_type}` for one iii console asset."""
    name = path.removeprefix(III_PREFIX) if path.startswith(III_PREFIX) else None
    asset = ASSETS.get(name) if name else None
    if asset is None or asset.trigger_type is None:
        known = ", ".join(p for p, _ in bus_assets())
        raise InvalidInput(f"unknown ui asset {path!r}; expected one of: {known}")
    return {"content": read(asset.name), "content_type": asset.content_type}
