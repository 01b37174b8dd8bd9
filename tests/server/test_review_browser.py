"""The review page in a real browser: headless Chromium (Debian's `chromium` and
`chromium-driver`) driven by Selenium against a gateway on loopback, both started here. A
reviewer logs in, filters, pages and opens records of a log seeded with hostile strings;
no script may run (a beacon listener must never be hit, the title and a global stay
untouched) and the console must stay free of errors. Screenshots of each view are written to
$REVIEW_SCREENSHOTS when set (docs/review.md shows them), else to the test's folder.

Skipped, saying why, where Chromium, its driver or Selenium is missing.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.config import AuditConfig, ClientConfig, ReviewConfig
from gateway.runtime import Services
from gateway.server.app import make_app
from tests.conftest import loopback_policy
from tests.review.seed import KINDS_QUERY, write_folder, write_kinds_chain

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="headless Chromium is not installed (apt-get install chromium chromium-driver)",
)
REVIEWER_TOKEN = "tok-review-browser"
AGENT_TOKEN = "tok-agent-browser"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
)


class Beacon:
    """A loopback HTTP listener that counts every request: a hostile script's target."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 -- the stdlib's name
                hits.append(self.path)
                self.send_response(204)
                self.end_headers()

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class GatewayThread:
    """The gateway on its own event loop in a thread, so the blocking browser calls of the
    test never stall it."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(30), "the gateway did not start"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        runner = web.AppRunner(make_app(self.services))
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = runner.addresses[0][1]
        self.runner = runner
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())
        self.loop.run_until_complete(self.services.close())
        self.loop.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


@pytest.fixture
def beacon() -> Iterator[Beacon]:
    listener = Beacon()
    yield listener
    listener.close()


def run_gateway(seeded: dict[str, Any], make_config: Any, write_policy: Any) -> GatewayThread:
    config = make_config(
        write_policy(loopback_policy(9)),
        audit=AuditConfig(path=seeded["template"]),
        review=ReviewConfig(enabled=True),
        signing_key=seeded["signing_key"],
        clients=(
            ClientConfig(
                id="alice",
                token_sha256=hashlib.sha256(REVIEWER_TOKEN.encode()).hexdigest(),
                role="reviewer",
            ),
            ClientConfig(
                id="research-agent", token_sha256=hashlib.sha256(AGENT_TOKEN.encode()).hexdigest()
            ),
        ),
    )
    services = Services(config)
    services.open()
    return GatewayThread(services)


@pytest.fixture
def gateway(tmp_path, beacon, make_config, write_policy) -> Iterator[GatewayThread]:
    running = run_gateway(
        write_folder(tmp_path / "audit", beacon=beacon.url), make_config, write_policy
    )
    yield running
    running.stop()


@pytest.fixture
def kinds_gateway(tmp_path, beacon, make_config, write_policy) -> Iterator[GatewayThread]:
    """The seeded folder plus chain gw-k: a search, authentication challenges and failures, a
    tunnel and its close, malformed requests, sanitised content."""
    seeded = write_folder(tmp_path / "audit", beacon=beacon.url)
    write_kinds_chain(seeded["template"])
    running = run_gateway(seeded, make_config, write_policy)
    yield running
    running.stop()


@pytest.fixture
def browser(tmp_path) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=DRIVER, log_output=os.devnull)
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = Path(os.environ.get("REVIEW_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def screenshot(driver: Any, folder: Path, name: str) -> None:
    """The whole page (up to 2400 px tall), through the DevTools protocol."""
    height = min(int(driver.execute_script("return document.documentElement.scrollHeight")), 2400)
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": 1280, "height": height, "scale": 1},
        },
    )
    (folder / f"review-{name}.png").write_bytes(base64.b64decode(shot["data"]))


def assert_nothing_ran(driver: Any, beacon: Beacon) -> None:
    assert driver.execute_script("return window.pwned") is None
    assert "pwned" not in driver.title
    assert beacon.hits == []
    errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []


def click_and_wait(driver: Any, element: Any, url_part: str) -> None:
    """Click a link or button and wait for the page it opens (a click does not wait).

    The old page is marked through WebDriver (not the page's own script, which the CSP
    forbids); the new page is there once a loaded document lacks the mark. Waiting for the old
    <html> element to go stale instead raced ChromeDriver: asked mid-navigation, it sometimes
    answers "Node with given id does not belong to the document" rather than "stale"."""
    driver.execute_script("window.__gatewayTestOldPage = true")
    element.click()
    WebDriverWait(driver, 20, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script(
            "return window.__gatewayTestOldPage === undefined && document.readyState === 'complete'"
        )
    )
    WebDriverWait(driver, 20).until(expected_conditions.url_contains(url_part))


def log_in(driver: Any, base: str, shots: Path | None = None) -> None:
    driver.get(base + "/review/")
    assert "/review/login" in driver.current_url
    driver.find_element(By.ID, "token").send_keys(REVIEWER_TOKEN)
    if shots is not None:
        screenshot(driver, shots, "login")
    click_and_wait(driver, driver.find_element(By.ID, "login"), "/review/")
    assert driver.current_url == base + "/review/"


def test_a_reviewer_logs_in_filters_pages_and_opens_records(
    gateway, browser, beacon, shots
) -> None:
    base = f"http://127.0.0.1:{gateway.port}"
    log_in(browser, base, shots)
    assert browser.title.startswith("Timeline")
    rows = browser.find_elements(By.CSS_SELECTOR, "#timeline tbody tr")
    assert len(rows) > 45  # every record of the three chains, the lifecycle ones included
    assert not browser.find_elements(By.ID, "older")
    assert browser.find_elements(By.CSS_SELECTOR, "tr.reload")
    screenshot(browser, shots, "timeline")

    # Filter through the form: the URL says what is shown, so it can be bookmarked.
    Select(browser.find_element(By.ID, "decision")).select_by_visible_text("deny")
    click_and_wait(browser, browser.find_element(By.ID, "apply"), "decision=deny")
    assert "decision=deny" in browser.current_url
    badges = {b.text for b in browser.find_elements(By.CSS_SELECTOR, "#timeline .badge")}
    assert badges == {"deny"}
    assert browser.find_elements(By.CSS_SELECTOR, "tr.reload")  # reloads stay marked
    text = browser.find_element(By.ID, "timeline").text
    assert "<script>document.title='pwned'" in text
    assert "<U+202E>" in text
    screenshot(browser, shots, "filtered")
    bookmarked = browser.current_url
    browser.get(bookmarked)
    assert browser.find_element(By.ID, "timeline").text == text

    # Page: 25 a page, older, then back to the newest.
    browser.get(base + "/review/?limit=25")
    first_page = browser.find_element(By.ID, "timeline").text
    click_and_wait(browser, browser.find_element(By.ID, "older"), "before=")
    assert "before=" in browser.current_url
    second_page = browser.find_element(By.ID, "timeline").text
    assert second_page != first_page
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline tbody tr")) == 25
    click_and_wait(browser, browser.find_element(By.ID, "newest"), "/review/")
    assert browser.find_element(By.ID, "timeline").text == first_page

    # A hostile record in full: every field shown as text.
    browser.get(base + "/review/?rule=rule-img")
    click_and_wait(
        browser,
        browser.find_element(By.CSS_SELECTOR, "#timeline tbody tr:not(.reload) a.detail"),
        "/review/record?",
    )
    assert "/review/record?" in browser.current_url
    fields = browser.find_element(By.ID, "fields").text
    assert '"><img src=x onerror="window.pwned=1' in fields
    assert browser.find_element(By.ID, "redirects").text
    screenshot(browser, shots, "record")

    # A 100 KB value: cut, the rest behind one click.
    browser.get(base + "/review/?domain=big.example")
    click_and_wait(
        browser,
        browser.find_element(By.CSS_SELECTOR, "#timeline tbody tr:not(.reload) a.detail"),
        "/review/record?",
    )
    details = browser.find_elements(By.CSS_SELECTOR, "details")
    assert details
    assert "THE-END-OF-THE-BIG-VALUE" not in browser.find_element(By.TAG_NAME, "main").text
    details[0].find_element(By.TAG_NAME, "summary").click()
    assert "THE-END-OF-THE-BIG-VALUE" in details[0].text

    browser.get(base + "/review/summary")
    assert browser.find_element(By.ID, "chart").find_elements(By.CSS_SELECTOR, "rect.bar")
    assert browser.find_elements(By.CSS_SELECTOR, "#chart line.reload")
    screenshot(browser, shots, "summary")
    browser.get(base + "/review/chains")
    chains = browser.find_element(By.TAG_NAME, "main").text
    assert "gw-c · INVALID" in chains and "gw-a · valid" in chains
    assert "signatures checked" in chains
    browser.find_element(By.LINK_TEXT, "line 3").click()
    WebDriverWait(browser, 20).until(expected_conditions.url_contains("line=3"))
    assert (
        "seq 3" in browser.find_element(By.TAG_NAME, "main").text
        or "line 3" in browser.title + browser.find_element(By.TAG_NAME, "h1").text
    )
    browser.get(base + "/review/chains")
    screenshot(browser, shots, "chains")
    assert_nothing_ran(browser, beacon)


def test_every_hostile_string_renders_as_text_in_every_view(gateway, browser, beacon) -> None:
    base = f"http://127.0.0.1:{gateway.port}"
    log_in(browser, base)
    for path in (
        "/review/?limit=200",
        "/review/?decision=deny",
        "/review/summary",
        "/review/chains",
    ):
        browser.get(base + path)
        assert not browser.find_elements(
            By.CSS_SELECTOR, "main script, main img, main iframe, main style"
        )
    browser.get(base + "/review/?decision=deny&limit=200")
    links = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "a.detail")]
    assert links
    for link in links:
        assert link.startswith(base + "/review/record?")
        browser.get(link)
        for anchor in browser.find_elements(By.TAG_NAME, "a"):
            assert anchor.get_attribute("href").startswith(base + "/review/")
    assert_nothing_ran(browser, beacon)


def test_an_agents_token_is_refused_in_the_browser(gateway, browser, beacon) -> None:
    base = f"http://127.0.0.1:{gateway.port}"
    browser.get(base + "/review/login")
    browser.find_element(By.ID, "token").send_keys(AGENT_TOKEN)
    click_and_wait(browser, browser.find_element(By.ID, "login"), "/review/login")
    assert "is an agent" in browser.find_element(By.ID, "login-problem").text
    browser.get(base + "/review/")
    assert "/review/login" in browser.current_url
    # The 403 itself is a console error in Chromium ("Failed to load resource"), so the
    # console is not checked here; nothing may have run all the same.
    assert browser.execute_script("return window.pwned") is None
    assert beacon.hits == []


def test_the_page_says_what_each_record_is_and_keeps_its_navigation(
    kinds_gateway, browser, beacon, shots
) -> None:
    base = f"http://127.0.0.1:{kinds_gateway.port}"
    log_in(browser, base)
    assert browser.find_element(By.ID, "logout").text == "log out"
    browser.get(base + "/review/?limit=200")
    rows = browser.find_elements(By.CSS_SELECTOR, "#timeline tbody tr")
    cells = [[td.text for td in row.find_elements(By.TAG_NAME, "td")] for row in rows]
    [search] = [row for row in cells if len(row) == 9 and row[2] == "WebSearch"]
    assert search[6] == f"query: {KINDS_QUERY}"
    assert {row[1] for row in cells if len(row) == 9 and row[1].startswith("no client")} == {
        "no client: refused before authentication",
        "no client: unauthenticated",
        "no client: unauthenticated (claimed research-agent)",
    }
    screenshot(browser, shots, "kinds-timeline")

    browser.get(base + "/review/summary")
    kinds = {
        row.find_element(By.TAG_NAME, "th").text: row.find_elements(By.TAG_NAME, "td")[0].text
        for row in browser.find_elements(By.CSS_SELECTOR, "#kinds tr")
    }
    assert kinds["authentication challenges"] == "1" and kinds["tunnel closes"] == "1"
    assert kinds["malformed requests"] == "2" and kinds["authentication failures"] == "1"
    signals = browser.find_element(By.ID, "signals").text
    assert "injected.example 1 3 7" in signals
    screenshot(browser, shots, "kinds-summary")

    browser.get(base + "/review/record?file=gateway-gw-k.jsonl&offset=999999")
    assert browser.find_element(By.TAG_NAME, "h1").text == "No such record"
    nav = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "header nav a")]
    assert nav == ["Timeline", "Summary", "Chains"]
    screenshot(browser, shots, "kinds-error")
    click_and_wait(browser, browser.find_element(By.LINK_TEXT, "Summary"), "/review/summary")
    # The 404 itself is a console error in Chromium ("Failed to load resource"): not checked.
    assert browser.execute_script("return window.pwned") is None and beacon.hits == []


def test_without_clients_there_is_nothing_to_log_out_of(
    tmp_path, browser, beacon, make_config, write_policy, shots
) -> None:
    seeded = write_folder(tmp_path / "audit", beacon=beacon.url)
    write_kinds_chain(seeded["template"])
    services = Services(
        make_config(
            write_policy(loopback_policy(9)),
            audit=AuditConfig(path=seeded["template"]),
            review=ReviewConfig(enabled=True),
        )
    )
    services.open()
    running = GatewayThread(services)
    try:
        browser.get(f"http://127.0.0.1:{running.port}/review/")
        header = browser.find_element(By.TAG_NAME, "header").text
        assert "loopback, no clients configured" in header and "log out" not in header
        assert not browser.find_elements(By.ID, "logout")
        assert browser.find_elements(By.CSS_SELECTOR, "header nav a")
        screenshot(browser, shots, "no-clients")
        assert_nothing_ran(browser, beacon)
    finally:
        running.stop()
