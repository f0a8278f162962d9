"""Browser tests: Debian's chromium, driven by playwright, with a virtual authenticator.

Playwright cannot download a browser here; it drives ``/usr/bin/chromium``
(Debian's package ``chromium``; ``.ci/run`` installs it). Without it the tests
skip with a message saying how to get it, except on CI (``CI=true``), where
they fail. Each test gets a fresh browser context whose page has a CDP
virtual authenticator (CTAP2, internal, resident keys, user verified,
presence simulated): a platform passkey the page registers and uses as a
person's would be.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Where the tests save what a person would have seen (screenshots).
ARTIFACTS = Path(os.environ.get("HATP_ARTIFACTS") or Path(__file__).parents[2] / "artifacts")
#: chromium's flags for a sandboxless, offline, headless run as root.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _chromium() -> str:
    found = os.environ.get("HATP_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if Path(found).exists():
        return found
    message = (
        "Debian's chromium is not installed: `apt-get install chromium` (or set HATP_CHROMIUM "
        "to a Chromium binary) to run the browser tests"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless chromium per module (gone before other modules' event loops run)."""
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page with a virtual platform authenticator of its own."""
    context = browser.new_context()
    context.set_default_timeout(20_000)
    tab = context.new_page()
    cdp = context.new_cdp_session(tab)
    cdp.send("WebAuthn.enable")
    cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )
    yield tab
    context.close()
