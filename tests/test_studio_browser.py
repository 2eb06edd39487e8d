"""rft studio in a real headless Chromium (Debian's chromium and chromium-driver, driven by Selenium): the config
generator is filled in, shows the validation error of a bad value and then accepts the config; the run view of a
finished demo run shows its curves, timings, generations and checkpoints. Screenshots of both pages are kept in
test-artifacts/ (RFT_TEST_ARTIFACTS to put them elsewhere)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from demo_run import short_demo
from studio_server import TOKENS, studio, wait_for

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER), reason="needs Debian's chromium and chromium-driver (`apt-get install -y chromium "
    "chromium-driver`; .ci/run installs them)")
ARTIFACTS = Path(os.environ.get("RFT_TEST_ARTIFACTS", Path(__file__).resolve().parent.parent / "test-artifacts"))


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1400"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)  # the given driver: nothing downloaded
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


def _text(driver, css: str) -> str:
    return driver.find_element("css selector", css).text


def _type(driver, key: str, value: str) -> None:
    box = driver.find_element("css selector", f'[data-key="{key}"]')
    box.clear()
    box.send_keys(value)


def test_config_generator_and_run_view_in_chromium(browser, tmp_path_factory, tmp_path):
    run = short_demo(tmp_path_factory)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with studio(run.parent, tmp_path) as url:
        # ---- the config generator: beginner view, filled in; a bad value; then valid
        browser.get(f"{url}/config?token={TOKENS[url]}")  # the printed URL: its token becomes the page's cookie
        wait_for(lambda: "rft: error:" in _text(browser, "#validation"), timeout=120)
        assert "actor_rollout_ref.model.path is required" in _text(browser, "#validation")
        _type(browser, "actor_rollout_ref.model.path", str(run / "grpo" / "model"))
        _type(browser, "data.train_files", str(run / "data" / "train.parquet"))
        _type(browser, "data.train_batch_size", "0")
        wait_for(lambda: "data.train_batch_size" in _text(browser, "#validation"), timeout=60)
        assert _text(browser, "#validation").startswith("\u2717 rft: error:")
        assert not browser.find_element("css selector", "#write").is_enabled()
        _type(browser, "data.train_batch_size", "16")
        _type(browser, "actor_rollout_ref.actor.ppo_mini_batch_size", "16")
        wait_for(lambda: "valid: rft train accepts" in _text(browser, "#validation"), timeout=60)
        assert "train_batch_size: 16" in _text(browser, "#yaml")
        browser.save_screenshot(str(ARTIFACTS / "studio_config.png"))
        # the expert view has every key, the unsupported ones disabled with their reason
        browser.find_element("css selector", "input[name=view][value=expert]").click()
        browser.find_element("css selector", "#filter").send_keys("return_full_prompt")
        unsupported = browser.find_element("css selector", '[data-key="data.return_full_prompt"]')
        assert not unsupported.is_enabled()
        assert "templated prompt" in browser.find_element("css selector", ".field.unsupported .help").text

        # ---- the run view of the finished demo run
        browser.get(f"{url}/run?dir={run}")
        wait_for(lambda: browser.find_element("css selector", "#run-status").get_attribute("data-status")
                 == "finished", timeout=120)
        assert "held-out accuracy" in _text(browser, "#run-status") and "after GRPO" in _text(browser, "#run-status")
        series = {(s.find_element("xpath", "..").get_attribute("data-chart"), s.get_attribute("data-name")):
                  int(s.get_attribute("data-points")) for s in browser.find_elements("css selector", "polyline.series")}
        assert series[("reward", "reward (critic/score/mean)")] == 4  # the GRPO steps
        assert series[("reward", "SFT loss (train/loss)")] == 5 + 30  # the copy and SFT stages, before them
        assert series[("accuracy", "arithmetic")] == 3  # step 0 (val_before_train), steps 2 and 4
        assert series[("length", "response length (mean)")] == 4
        assert "gen" in _text(browser, "#timings") and "update_actor" in _text(browser, "#timings")
        assert "grpo, step 4" in _text(browser, "#generations-title")
        assert len(browser.find_elements("css selector", "#generations tr")) == 1 + 4  # header + 4 samples
        assert "global_step_4 (latest)" in _text(browser, "#checkpoints")
        browser.save_screenshot(str(ARTIFACTS / "studio_run.png"))
    assert (ARTIFACTS / "studio_run.png").stat().st_size > 10_000
