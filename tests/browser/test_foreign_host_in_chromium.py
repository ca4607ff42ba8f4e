"""DNS rebinding, in a real browser: Chromium resolving a foreign name to 127.0.0.1 (as an attacker's DNS would)
gets egg's refusal under that name, not the app; the same server under its own name serves the app."""

from __future__ import annotations

from urllib.parse import urlsplit

from playwright.sync_api import expect, sync_playwright

from tests.browser.conftest import CHROMIUM, CHROMIUM_FLAGS
from tests.browser.test_app_in_chromium import settled


def test_a_foreign_host_name_that_resolves_to_the_app_gets_the_refusal_not_the_app(server):
    port = urlsplit(server.url).port
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=[*CHROMIUM_FLAGS, "--host-resolver-rules=MAP evil.example 127.0.0.1"])
        page = browser.new_page()
        reply = page.goto(f"http://evil.example:{port}/")
        assert reply.status == 403 and reply.headers["x-frame-options"] == "DENY"
        expect(page.locator("body")).to_contain_text("egg: this app answers only to its own host name")
        assert page.locator("[data-testid='stApp']").count() == 0
        reply = page.goto(f"http://localhost:{port}/")
        assert reply.status == 200
        settled(page)
        expect(page.get_by_role("heading", name="New session")).to_be_visible()
        browser.close()
