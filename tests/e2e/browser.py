"""Headless Chromium (Debian's chromium + chromium-driver) driven by Selenium, as a user clicks.

Every step can save a screenshot under ``test-artifacts/e2e/browser/``: when a browser test
fails, the pictures say what the page showed.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.e2e.stack import ARTIFACTS

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SHOTS = ARTIFACTS / "browser"


def missing() -> str | None:
    """Why no browser test can run here, or None."""
    absent = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if absent:
        return (f"{', '.join(absent)} not found: install Debian's chromium and chromium-driver "
                "(`make system-deps` does, as root) to run the browser tests")
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: `pip install -e '.[dev]'`"
    return None


class Browser:
    def __init__(self, base_url: str):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        self.profile = tempfile.mkdtemp(prefix="aigc-chromium-")
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--no-first-run", "--window-size=1400,1000", f"--user-data-dir={self.profile}"):
            options.add_argument(arg)
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.driver.implicitly_wait(15)
        self.base_url = base_url
        SHOTS.mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        self.driver.quit()
        shutil.rmtree(self.profile, ignore_errors=True)

    def open(self, path: str) -> None:
        self.driver.get(self.base_url + path)

    def leave(self) -> None:
        """Close the page (the session stays): an open Airflow page polls the API every few seconds, which costs the
        browser and the api-server CPU the pipeline's tasks need while a test waits for runs."""
        self.driver.get("about:blank")

    def shot(self, name: str) -> Path:
        path = SHOTS / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def css(self, selector: str):
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def xpath(self, expression: str):
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.XPATH, expression)

    def log_in(self, user: str, password: str) -> None:
        """Fill Airflow's login form (SimpleAuthManager), wherever a page sent us to it."""
        self.css("input[name=username]").send_keys(user)
        self.css("input[name=password]").send_keys(password)
        self.css("button[type=submit]").click()
        self.until(lambda: "/auth/login" not in self.driver.current_url, "the login to go through")

    def type_into(self, selector: str, text: str) -> None:
        """Type ``text`` into a form field as a user does, until the field holds exactly it: the trigger form
        re-renders while it validates, and a key pressed meanwhile is sometimes lost (seen here)."""
        from selenium.webdriver.common.keys import Keys

        def typed() -> bool:
            field = self.css(selector)
            field.send_keys(Keys.CONTROL, "a")
            field.send_keys(Keys.DELETE)
            for char in text:
                field.send_keys(char)
            return self.css(selector).get_attribute("value") == text

        self.until(typed, f"{selector} to hold {text!r}")

    def all_xpath(self, expression: str) -> list:
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.XPATH, expression)

    def until(self, condition: Callable[[], object], what: str, timeout: float = 30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                result = condition()
            except Exception:  # noqa: BLE001 - the page is still rendering
                result = None
            if result:
                return result
            time.sleep(0.5)
        shot = self.shot(f"timeout-{int(time.time())}")
        raise AssertionError(f"timed out waiting for {what}; the page is in {shot}")
