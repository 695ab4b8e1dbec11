#!/usr/bin/env python3
"""A real run's report.html in a real browser, offline.

Trains gpt-oss-tiny for 12 steps on Debian's fortunes (eval every 4 steps, checkpoints, the
attribution table), runs `kiln report`, and opens the page in Debian's chromium, headless,
driven by Selenium through Debian's chromedriver (never a downloaded browser). Checks:

- every chart canvas exists and its Chart.js instance holds the run's points (one per step
  of metrics.jsonl, one per eval event, one bar per attribution row); the expert-load heat
  maps drew layers x logged steps cells;
- the summary's final loss and final eval loss are metrics.jsonl's and events.jsonl's;
- the page made no network request (Chrome's performance log: every Network request is the
  page's own file:// URL) and logged no console error;
- a page rendered without Chart.js still has its tables, says what is missing, and logs no
  error;
- `kiln report --follow`: the open page reloads itself and shows new steps as they land,
  keeping the reader's scroll position, and once the run's finish event is written the
  command exits and the page stops reloading.

Saves a full-page screenshot to --screenshot. Run by CTest (tests/report/CMakeLists.txt) with
the project venv's Python (python/requirements.txt: selenium).

Usage: report_browser_test.py --kiln build/kiln --screenshot build/report_screenshot.png [--keep DIR]
"""
import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

FORTUNES = "/usr/share/games/fortunes"
LINE_CHARTS = ["chart-loss", "chart-lr", "chart-norms", "chart-step-time", "chart-tokens", "chart-mfu"]


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def read_jsonl(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


def train(kiln, base, run_name):
    args = [kiln, "train", "model_name=gpt-oss-tiny", "steps=12", f"run_name={run_name}",
            f"base_output_directory={base}", "log_period=4", "checkpoint_period=5", "report=true"]
    if os.path.isdir(FORTUNES):
        args += ["override_model_config=true", "per_device_batch_size=1", "max_target_length=128",
                 "learning_rate=3e-3", "dataset_type=text", f"dataset_path={FORTUNES}", "tokenizer_type=bytes",
                 "vocab_size=258", f"dataset_cache_dir={base}/corpus", "eval_interval=4", "eval_steps=2"]
    else:
        print(f"note: {FORTUNES} is missing (Debian's fortunes): synthetic data, no eval loss")
    t0 = time.time()
    r = subprocess.run(args, capture_output=True, text=True)
    check(r.returncode == 0, f"kiln train failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    print(f"kiln train: {time.time() - t0:.1f} s")
    return os.path.join(base, run_name)


def make_driver(chromium, chromedriver):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        fail("selenium is not in this Python: scripts/setup_venv.sh")
    for path, package in ((chromium, "chromium"), (chromedriver, "chromium-driver")):
        check(os.path.exists(path), f"{path} is missing: apt-get install {package}")
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager never looks for a download
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-default-apps",
                "--disable-sync", "--hide-scrollbars", "--window-size=1400,1000", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)


# Multiplies every wait: a sanitizer build runs kiln several times slower (--slack).
SLACK = 1.0


def wait_for(predicate, seconds, what):
    seconds *= SLACK
    deadline = time.time() + seconds
    last_error = None
    while time.time() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # a reload in progress: ask again
            last_error = e
        time.sleep(0.1)
    fail(f"timed out after {seconds} s waiting for {what}" + (f" (last error: {last_error})" if last_error else ""))


def open_page(driver, path):
    url = "file://" + os.path.abspath(path)
    driver.get(url)
    wait_for(lambda: driver.execute_script("return document.body.getAttribute('data-rendered')"), 15,
             f"{path} to render")
    return url


def check_offline_and_quiet(driver, page_url, what):
    """No request but the page itself; no console error (both logs drain when read)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] in ("Network.requestWillBeSent", "Network.webSocketCreated"):
            urls.append(message["params"].get("request", {}).get("url") or message["params"].get("url"))
    others = [u for u in urls if u != page_url]
    check(not others, f"{what}: the page made network requests: {others}")
    check(page_url in urls, f"{what}: the performance log saw no request at all (is it on?): {urls}")
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    check(not errors, f"{what}: console errors: {errors}")


def chart_points(driver, canvas_id):
    return driver.execute_script(
        "var c = Chart.getChart(document.getElementById(arguments[0]));"
        "return c ? c.data.datasets.map(function (d) { return [d.label, d.data.length]; }) : null;", canvas_id)


def check_page(driver, run_dir, page):
    name = os.path.basename(run_dir)
    metrics = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    events = read_jsonl(os.path.join(run_dir, "events.jsonl"))
    steps = len(metrics)
    evals = [e for e in events if e["event"] == "eval"]
    attribution = [e for e in events if e["event"] == "attribution"]
    url = open_page(driver, page)
    check(driver.execute_script("return typeof Chart") == "function", "Chart.js is not on the page")
    for canvas_id in LINE_CHARTS:
        sets = chart_points(driver, canvas_id)
        check(sets, f"#{canvas_id}: no Chart.js chart")
        check(sets[0] == [sets[0][0], steps] and sets[0][0].startswith(name),
              f"#{canvas_id}: first dataset {sets[0]}, want {steps} points named {name}")
    loss_sets = dict(chart_points(driver, "chart-loss"))
    if evals:
        check(loss_sets.get(f"{name} · eval") == len(evals), f"#chart-loss eval points {loss_sets}, want {len(evals)}")
    if attribution:
        rows = [r for r in attribution[-1]["rows"] if r["name"] != "total"]
        check(chart_points(driver, "chart-attribution")[0][1] == len(rows), "#chart-attribution: one bar per row")
    layers = max((len(m["expert_load"]) for m in metrics if "expert_load" in m), default=0)
    logged = sum(1 for m in metrics if "expert_load" in m)
    for kind in ("imbalance", "dropped"):
        cells = driver.execute_script(
            f"var c = document.getElementById('heatmap-{kind}-0'); return c && c.getAttribute('data-cells');")
        check(cells == str(layers * logged), f"#heatmap-{kind}-0 drew {cells} cells, want {layers} x {logged}")

    def summary(key):
        return driver.execute_script(
            "var td = document.querySelector('#summary td[data-key=\"' + arguments[0] + '\"]');"
            "return td ? td.innerText : null;", key)
    final = summary("final_loss")
    check(final and abs(float(final.split()[0]) - metrics[-1]["loss"]) <= 5e-5,
          f"summary final loss {final!r}, metrics.jsonl says {metrics[-1]['loss']}")
    if evals:
        text = summary("final_eval_loss")
        check(text and abs(float(text.split()[0]) - evals[-1]["eval_loss"]) <= 5e-5,
              f"summary final eval loss {text!r}, events.jsonl says {evals[-1]['eval_loss']}")
    check(summary("steps").startswith(f"{steps} "), f"summary steps {summary('steps')!r}, want {steps}")
    check_offline_and_quiet(driver, url, page)
    return url


def screenshot(driver, path):
    """The whole page, 1400 px wide, as a person's browser window would lay it out."""
    width = driver.execute_script("return document.documentElement.clientWidth")
    height = min(driver.execute_script("return document.documentElement.scrollHeight"), 16000)
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}})
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    print(f"screenshot: {path} ({width} x {height})")


def check_follow(driver, kiln, run_dir, work):
    """A live page over a run that is still writing: new steps land, then it stops."""
    live = os.path.join(work, "live")
    os.makedirs(live)
    metrics = open(os.path.join(run_dir, "metrics.jsonl")).read().splitlines(keepends=True)
    events = open(os.path.join(run_dir, "events.jsonl")).read().splitlines(keepends=True)
    finish = [line for line in events if json.loads(line)["event"] == "finish"]
    with open(os.path.join(live, "metrics.jsonl"), "w") as f:
        f.writelines(metrics[:6])
    with open(os.path.join(live, "events.jsonl"), "w") as f:
        f.writelines(line for line in events if json.loads(line)["event"] == "start")
    page = os.path.join(live, "report.html")
    proc = subprocess.Popen([kiln, "report", live, "--follow", "--interval", "1"], stdout=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: os.path.exists(page), 10, "kiln report --follow to write the page")
        url = open_page(driver, page)
        check(driver.execute_script("return !!document.getElementById('live')"), "the live page has no live badge")
        check(chart_points(driver, "chart-loss")[0][1] == 6, "the live page does not show the first 6 steps")
        driver.execute_script("window.kilnNotReloaded = true; window.scrollTo(0, 1200);")
        with open(os.path.join(live, "metrics.jsonl"), "a") as f:
            f.writelines(metrics[6:])
        wait_for(lambda: chart_points(driver, "chart-loss")[0][1] == len(metrics), 10,
                 "the open page to reload and show every step")
        check(not driver.execute_script("return window.kilnNotReloaded === true"), "the page did not reload")
        scroll = wait_for(lambda: driver.execute_script("return window.scrollY"), 5, "the scroll position back")
        check(abs(scroll - 1200) <= 2, f"the reload lost the reader's place: scrollY {scroll}, was 1200")
        with open(os.path.join(live, "events.jsonl"), "a") as f:
            f.writelines(finish)
        out, _ = proc.communicate(timeout=10 * SLACK)
        check(proc.returncode == 0, f"kiln report --follow exited {proc.returncode}")
        check("stopped following: the run wrote its finish event" in out, f"kiln report --follow said:\n{out}")
        # The page reloads once more, into the final page, which has no refresh and says finished.
        wait_for(lambda: driver.execute_script(
            "return !document.getElementById('live') && document.body.getAttribute('data-rendered') &&"
            " document.querySelector('#summary td[data-key=\"status\"]').innerText.indexOf('finished') === 0"),
            10, "the final page")
        check_offline_and_quiet(driver, url, "the live page")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--screenshot", required=True)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    parser.add_argument("--keep", help="work in this directory and keep it")
    parser.add_argument("--slack", type=float, default=1.0, help="multiply every wait by this (sanitizer builds)")
    args = parser.parse_args()
    global SLACK
    SLACK = args.slack
    t0 = time.time()
    work = args.keep or tempfile.mkdtemp(prefix="kiln_report_browser_")
    if args.keep:
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
    driver = None
    try:
        run_dir = train(args.kiln, os.path.join(work, "out"), "browser")
        r = subprocess.run([args.kiln, "report", run_dir], capture_output=True, text=True)
        page = os.path.join(run_dir, "report.html")
        check(r.returncode == 0 and f"wrote {page}" in r.stdout, f"kiln report: {r.returncode} {r.stdout} {r.stderr}")
        driver = make_driver(args.chromium, args.chromedriver)
        check_page(driver, run_dir, page)
        screenshot(driver, args.screenshot)
        print(f"report page: every chart, the summary, offline, no console error ({time.time() - t0:.1f} s)")

        # Without Chart.js: the tables, the heat maps and a sentence, and still no error.
        bare = os.path.join(work, "bare.html")
        r = subprocess.run([args.kiln, "report", run_dir, "-o", bare, "--chartjs", "/nonexistent/chart.min.js"],
                           capture_output=True, text=True)
        check(r.returncode == 0 and "libjs-chart.js" in r.stderr, f"kiln report --chartjs missing: {r.stderr}")
        url = open_page(driver, bare)
        check(driver.execute_script("return document.getElementById('no-chartjs').innerText").find("libjs-chart.js") >= 0,
              "the page without Chart.js does not say what is missing")
        check(driver.execute_script("return document.querySelectorAll('#summary td').length") > 0, "no summary")
        check_offline_and_quiet(driver, url, "the page without Chart.js")

        check_follow(driver, args.kiln, run_dir, work)
        print(f"follow mode: the open page reloaded into new steps and stopped at the finish event")
    finally:
        if driver is not None:
            driver.quit()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"PASS ({time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main()
