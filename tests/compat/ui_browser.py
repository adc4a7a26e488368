"""The web UI in a real browser: Debian's Chromium driven by Selenium.

Runs against a server the quickstart filled (tests/compat/ui.sh starts it). Logs in
with a token, visits every page, follows lineage links from a drift report to the
data, opens the link the MLflow client prints after a run, and checks that a viewer
sees neither another project nor a maintainer's form, and that a form without its
CSRF token is refused. Every page is checked for console errors and failed requests;
screenshots of the main pages go to $UI_SCREENSHOTS when it is set.

Environment: QANAT_URL, QANAT_ADMIN_TOKEN, QANAT_VIEWER_TOKEN (a viewer of `default`
only), QANAT_OTHER_PROJECT (a project the viewer is not in), MLFLOW_RUN_LINK (the
"View run" link the MLflow client printed), QANAT_TICKER_JOB (a job of `default` that
prints a line every half second for a while).
"""

import http.cookiejar
import json
import os
import re
import sys
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

URL = os.environ["QANAT_URL"].rstrip("/")
ADMIN = os.environ["QANAT_ADMIN_TOKEN"]
VIEWER = os.environ["QANAT_VIEWER_TOKEN"]
OTHER = os.environ.get("QANAT_OTHER_PROJECT", "other")
RUN_LINK = os.environ.get("MLFLOW_RUN_LINK", "")
TICKER = os.environ.get("QANAT_TICKER_JOB", "")
SHOTS = os.environ.get("UI_SCREENSHOTS", "")
PROJECT = "default"

failures = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {detail}"))
    if not ok:
        failures.append(what)


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for flag in [
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--window-size=1280,900",
    ]:
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    service = Service(executable_path=os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    d = webdriver.Chrome(service=service, options=opts)
    d.set_page_load_timeout(60)
    return d


def drain(d):
    """Console messages at error level, and responses with a status of 400 or more."""
    errors = [e["message"] for e in d.get_log("browser") if e.get("level") == "SEVERE"]
    failed = []
    for e in d.get_log("performance"):
        msg = json.loads(e["message"])["message"]
        if msg.get("method") == "Network.responseReceived":
            r = msg["params"]["response"]
            if r.get("status", 0) >= 400:
                failed.append(f'{r["status"]} {r["url"]}')
        elif msg.get("method") == "Network.loadingFailed":
            # A request cut short by leaving the page (a followed log's long poll) is
            # not a failure.
            if msg["params"].get("errorText") != "net::ERR_ABORTED":
                failed.append(f'failed {msg["params"].get("errorText")}')
    return errors, failed


def visit(d, path, heading, shot=None, expect_status_ok=True):
    """Opens `path`, checks its h1 holds `heading`, no console error, no failed request."""
    d.get(URL + path if path.startswith("/") else path)
    h1 = d.find_elements(By.TAG_NAME, "h1")
    text = h1[0].text if h1 else ""
    check(f"{path}: heading has '{heading}'", heading.lower() in text.lower(), f"h1 was '{text}'")
    errors, failed = drain(d)
    check(f"{path}: no console error", not errors, "; ".join(errors)[:500])
    if expect_status_ok:
        check(f"{path}: no request failed", not failed, "; ".join(failed)[:500])
    accessible(d, path)
    if shot and SHOTS:
        d.save_screenshot(os.path.join(SHOTS, f"{shot}.png"))
    return text


AXE = os.environ.get("QANAT_AXE", "")
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]


def accessible(d, path):
    """Runs axe-core (WCAG 2.1 A and AA rules) on the page open in `d`: every
    violation fails, with the rule and the first elements it names."""
    if not AXE:
        return
    with open(AXE, encoding="utf-8") as f:
        d.execute_script(f.read())
    result = d.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {runOnly: {type: 'tag', values: arguments[0]}, resultTypes: ['violations']})"
        ".then(r => done(r.violations.map(v => v.id + ' (' + v.impact + '): ' + v.help + ' at '"
        " + v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(', '))))"
        ".catch(e => done(['axe failed: ' + e]));",
        AXE_TAGS,
    )
    check(f"{path}: no WCAG 2.1 AA violation (axe-core)", not result, "; ".join(result)[:1500])


def links(d, part):
    return [a.get_attribute("href") for a in d.find_elements(By.CSS_SELECTOR, "a[href]") if part in (a.get_attribute("href") or "")]


def live_log(d, path):
    """A running job's page follows its log: lines printed after the page loaded
    appear in it without a reload."""
    import time

    follow = []
    for _ in range(60):
        d.get(URL + path)
        follow = d.find_elements(By.CSS_SELECTOR, "pre[data-log]")
        if follow:
            break
        time.sleep(1)
    check("a running job's page follows its log", bool(follow), "the job never ran")
    if not follow:
        return
    d.execute_script("window.__qanatPage = 1")
    ticks = lambda: [int(t) for t in re.findall(r"tick (\d+)", follow[0].text)]
    first = max(ticks(), default=-1)
    grown = False
    for _ in range(40):
        time.sleep(0.5)
        if max(ticks(), default=-1) >= first + 3:
            grown = True
            break
    same_page = d.execute_script("return window.__qanatPage === 1")
    check("the followed log grows in place (no reload)", grown and same_page, f"ticks {first} -> {max(ticks(), default=-1)}, same page {same_page}")
    errors, failed = drain(d)
    check(f"{path}: following the log, no console error or failed request", not errors and not failed, "; ".join(errors + failed)[:500])


def navigating(d, action):
    """Runs `action` (a click or submit that loads another page) and waits until the
    old page is gone, so that what is checked next is the new page (Selenium returns
    from a click before the navigation it starts has finished). A page that does not
    change is left to the check that follows."""
    from selenium.common.exceptions import TimeoutException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    old = d.find_element(By.TAG_NAME, "html")
    action()

    def gone(_):
        # Chrome answers a query on a node of the unloaded document either with a
        # stale-element error or, mid-navigation, with an inspector error ("Node with
        # given id does not belong to the document"): both mean the old page is gone.
        try:
            old.is_enabled()
            return False
        except WebDriverException:
            return True

    try:
        WebDriverWait(d, 30).until(gone)
    except TimeoutException:
        pass


def login(d, token):
    d.get(URL + "/ui/login")
    d.find_element(By.ID, "token").send_keys(token)
    navigating(d, lambda: d.find_element(By.CSS_SELECTOR, "form.login button").click())


def session_cookie_flags():
    """The login sets an HttpOnly, SameSite session cookie, and pages carry a strict CSP."""
    jar = http.cookiejar.CookieJar()

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None

    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NoRedirect)
    page = opener.open(URL + "/ui/login")
    csp = page.headers.get("Content-Security-Policy", "")
    check("pages carry a CSP that runs only the server's own script", "script-src 'self'" in csp and "default-src 'none'" in csp, csp)
    html = page.read().decode()
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', html).group(1)
    body = urllib.parse.urlencode({"token": ADMIN, "csrf": csrf, "next": "/ui/"}).encode()
    try:
        opener.open(URL + "/ui/login", data=body)
        check("login answers 303", False, "no redirect")
    except urllib.error.HTTPError as e:
        cookies = e.headers.get_all("Set-Cookie") or []
        session = [c for c in cookies if c.startswith("qanat_session=")]
        check("login answers 303 to the page asked for", e.code == 303 and e.headers.get("Location") == "/ui/", f"{e.code} {e.headers.get('Location')}")
        check("the session cookie is HttpOnly and SameSite", bool(session) and "HttpOnly" in session[0] and "SameSite=Lax" in session[0], str(cookies))
    # A login form sent without the form's own cookie is refused.
    try:
        urllib.request.urlopen(urllib.request.Request(URL + "/ui/login", data=body))
        check("a login without the form's cookie is refused", False, "accepted")
    except urllib.error.HTTPError as e:
        check("a login without the form's cookie is refused", e.code == 403, str(e.code))


def main():
    session_cookie_flags()
    d = browser()
    try:
        # Not logged in: a page sends the browser to the login form, and back after.
        d.get(URL + f"/ui/p/{PROJECT}/models")
        check("a page asks for a login first", "/ui/login" in d.current_url, d.current_url)
        drain(d)
        d.find_element(By.ID, "token").send_keys(ADMIN)
        if SHOTS:
            d.save_screenshot(os.path.join(SHOTS, "login.png"))
        navigating(d, lambda: d.find_element(By.CSS_SELECTOR, "form.login button").click())
        check("after the login, the page asked for", d.current_url.endswith(f"/ui/p/{PROJECT}/models"), d.current_url)
        drain(d)

        visit(d, "/ui/", "Projects", "projects")
        visit(d, f"/ui/p/{PROJECT}", PROJECT, "project")
        visit(d, f"/ui/p/{PROJECT}/experiments", "Experiments")
        exps = links(d, f"/ui/p/{PROJECT}/experiments/")
        check("experiments are listed", bool(exps), "none")
        run_pages = []
        for e in exps:
            visit(d, e, "Runs of", "runs" if e == exps[0] else None)
            run_pages += links(d, f"/ui/p/{PROJECT}/runs/")
        check("runs are listed", bool(run_pages), "none")
        # Sort by a column, then filter with MLflow's syntax.
        if exps:
            d.get(exps[0])
            sorts = [a for a in d.find_elements(By.CSS_SELECTOR, "#runs thead a") if "metrics." in (a.get_attribute("href") or "")]
            if sorts:
                navigating(d, lambda: sorts[0].click())
                check("sorting by a metric keeps the table", bool(d.find_elements(By.CSS_SELECTOR, "#runs tbody tr")), "empty")
            box = d.find_element(By.NAME, "filter")
            box.clear()
            box.send_keys("attributes.status = 'FINISHED'")
            navigating(d, lambda: box.submit())
            check("a filter in MLflow's syntax finds runs", bool(d.find_elements(By.CSS_SELECTOR, "#runs tbody tr")), "no rows")
            box = d.find_element(By.NAME, "filter")
            box.clear()
            box.send_keys("metrics.nope >>> 1")
            navigating(d, lambda: box.submit())
            check("a bad filter says why", bool(d.find_elements(By.CSS_SELECTOR, "p.error")), "no message")
            drain(d)
        run_pages = sorted(set(run_pages))
        for i, r in enumerate(run_pages[:6]):
            visit(d, r, "Run", "run" if i == 0 else None)
        # A run with charts: at least one SVG chart somewhere.
        charts = 0
        for r in run_pages[:6]:
            d.get(r)
            charts += len(d.find_elements(By.CSS_SELECTOR, ".charts svg"))
            arts = [a for a in d.find_elements(By.CSS_SELECTOR, "#artifacts + * a, #artifacts ~ div a") if "file=1" in (a.get_attribute("href") or "")]
            if arts:
                navigating(d, lambda: arts[0].click())
                check("an artifact opens its preview", bool(d.find_elements(By.ID, "preview")), d.current_url)
                drain(d)
        drain(d)
        check("run pages draw metric charts", charts > 0, "no chart")
        if len(run_pages) >= 2:
            ids = [r.rsplit("/", 1)[1] for r in run_pages[:2]]
            visit(d, f"/ui/p/{PROJECT}/compare?run={ids[0]}&run={ids[1]}", "Compare", "compare")

        visit(d, f"/ui/p/{PROJECT}/models", "models", "models")
        models = links(d, f"/ui/p/{PROJECT}/models/")
        check("models are listed", bool(models), "none")
        for m in models[:3]:
            visit(d, m, "Model", "model" if m == models[0] else None)
        visit(d, f"/ui/p/{PROJECT}/datasets", "Datasets", "datasets")
        datasets = [u for u in links(d, f"/ui/p/{PROJECT}/datasets/") if "/versions/" not in u]
        for ds in datasets[:3]:
            visit(d, ds, "Dataset")
            for v in links(d, "/versions/")[:2]:
                visit(d, v, "version", "dataset-version")
            compare = d.find_elements(By.CSS_SELECTOR, "form.filters button")
            if compare:
                d.get(ds)
                navigating(d, lambda: d.find_element(By.CSS_SELECTOR, "form.filters button").click())
                check("two versions compare", "→" in d.find_element(By.TAG_NAME, "h1").text, d.current_url)
                drain(d)
        visit(d, f"/ui/p/{PROJECT}/features", "Features", "features")
        visit(d, f"/ui/p/{PROJECT}/jobs", "Jobs", "jobs")
        if TICKER:
            live_log(d, f"/ui/p/{PROJECT}/jobs/{TICKER}")
        for j in links(d, f"/ui/p/{PROJECT}/jobs/")[:3]:
            visit(d, j, "Job", "job")
        visit(d, f"/ui/p/{PROJECT}/deployments", "Deployments", "deployments")
        for dep in links(d, f"/ui/p/{PROJECT}/deployments/")[:2]:
            visit(d, dep, "Deployment", "deployment")
        visit(d, f"/ui/p/{PROJECT}/monitors", "Monitors", "monitors")
        monitors = links(d, f"/ui/p/{PROJECT}/monitors/")
        check("a monitor is listed", bool(monitors), "none")
        for m in monitors[:1]:
            visit(d, m, "Monitor", "monitor")
            frames = d.find_elements(By.CSS_SELECTOR, "iframe.report")
            check("the monitor page frames its latest drift report", bool(frames), "no frame")
            if frames:
                d.switch_to.frame(frames[0])
                check("the framed report draws each column's two distributions",
                      len(d.find_elements(By.TAG_NAME, "svg")) > 0, d.page_source[:200])
                d.switch_to.default_content()
            reports = links(d, "/report")
            if reports:
                d.get(reports[0])
                check("a drift report opens", "drift" in d.page_source.lower(), d.current_url)
                drain(d)
            # From the drift report's lineage to the data it came from.
            d.get(m)
            lineage = [a for a in d.find_elements(By.LINK_TEXT, "its lineage")]
            check("the check links its lineage", bool(lineage), "no link")
            if lineage:
                navigating(d, lambda: lineage[0].click())
                visit(d, d.current_url, "Lineage of drift_report", "lineage")
                data = links(d, "/datasets/")
                check("the drift report's lineage reaches a dataset version", bool(data), "no dataset link")
                if data:
                    d.get(data[0])
                    check("the lineage link opens the dataset version", "version" in d.find_element(By.TAG_NAME, "h1").text, d.current_url)
                    check("the dataset version shows column profiles", "Column profiles" in d.page_source, "")
                    drain(d)
        visit(d, "/ui/audit", "Audit log", "audit")
        navigating(d, lambda: d.find_element(By.CSS_SELECTOR, "button[name=verify]").click())
        check("the audit chain verifies", "verifies" in d.page_source, "no verification")
        drain(d)
        visit(d, "/ui/compliance", "Compliance report", "compliance")
        check("the compliance report says where data lives", "Where data lives" in d.page_source and "uae-north" in d.page_source, "")
        check("the compliance report verifies the audit chain", "The chain verifies" in d.page_source, "")
        navigating(d, lambda: d.execute_script(
            "var f=document.querySelector('form.filters'); f.querySelector('input[name=project]').value=%s; f.submit();" % json.dumps(PROJECT)))
        check("the compliance report narrows to one project", f"project {PROJECT}" in d.find_element(By.TAG_NAME, "main").text, d.current_url)
        drain(d)

        # The keyboard: the first Tab reaches the skip link, which leads to the content.
        d.get(URL + f"/ui/p/{PROJECT}/models")
        d.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
        focused = d.switch_to.active_element
        check("the first Tab reaches the skip link", focused.text == "Skip to the content", focused.text)
        drain(d)
        # A phone's screen: every page fits its width (tables and charts scroll or
        # shrink inside it).
        d.set_window_size(390, 844)
        phone_pages = [f"/ui/p/{PROJECT}", f"/ui/p/{PROJECT}/experiments"] + exps[:1] + run_pages[:1] + models[:1]
        phone_pages += [f"/ui/p/{PROJECT}/datasets", f"/ui/p/{PROJECT}/jobs", f"/ui/p/{PROJECT}/deployments"] + monitors[:1]
        for path in phone_pages:
            d.get(path if path.startswith("http") else URL + path)
            over = d.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
            check(f"{path} fits a phone's width", over <= 1, f"{over}px wider than the screen")
        if SHOTS:
            d.get(run_pages[0] if run_pages else URL + "/ui/")
            d.save_screenshot(os.path.join(SHOTS, "phone-run.png"))
        drain(d)
        d.set_window_size(1280, 900)

        # The link the MLflow client printed opens its run.
        if RUN_LINK:
            d.get(RUN_LINK)
            check("MLflow's 'View run' link opens the run", "/ui/p/" in d.current_url and "/runs/" in d.current_url, d.current_url)
            check("... and shows it", d.find_element(By.TAG_NAME, "h1").text.startswith("Run "), d.find_element(By.TAG_NAME, "h1").text)
            drain(d)
        else:
            check("MLflow's 'View run' link was given", False, "MLFLOW_RUN_LINK is empty")

        # A form without its CSRF token is refused (and nothing moves).
        if models:
            d.get(models[0])
            forms = d.find_elements(By.CSS_SELECTOR, "form[action$='/promote']")
            check("a maintainer sees the promote form", bool(forms), "no form")
            if forms:
                navigating(d, lambda: d.execute_script(
                    "var f=document.querySelector(\"form[action$='/promote']\");"
                    "f.removeAttribute('data-confirm');"
                    "f.querySelector('input[name=csrf]').remove(); f.submit();"
                ))
                check("a form without its CSRF token is refused", "CSRF" in d.page_source and "Not allowed" in d.page_source, d.page_source[:300])
                drain(d)
                # With its token, the same form works.
                d.get(models[0])
                navigating(d, lambda: d.execute_script("var f=document.querySelector(\"form[action$='/promote']\"); f.removeAttribute('data-confirm'); f.submit();"))
                check("the promote form with its token moves the alias", "/models/" in d.current_url and "Model " in d.find_element(By.TAG_NAME, "h1").text, d.current_url)
                drain(d)

        # Log out: the session is gone.
        navigating(d, lambda: d.find_element(By.CSS_SELECTOR, ".who button").click())
        d.get(URL + f"/ui/p/{PROJECT}")
        check("after logging out, pages ask for a login", "/ui/login" in d.current_url, d.current_url)
        drain(d)
    finally:
        d.quit()

    # A viewer: their project only, and no maintainer's form.
    v = browser()
    try:
        login(v, VIEWER)
        drain(v)
        v.get(URL + "/ui/")
        names = [a.text for a in v.find_elements(By.CSS_SELECTOR, ".cards h2 a")]
        check("a viewer sees only their projects", PROJECT in names and OTHER not in names, str(names))
        v.get(URL + f"/ui/p/{OTHER}")
        check("a viewer cannot open another project's pages", "Not found" in v.find_element(By.TAG_NAME, "h1").text, v.find_element(By.TAG_NAME, "h1").text)
        v.get(URL + f"/ui/p/{OTHER}/datasets")
        check("... nor its datasets", "Not found" in v.find_element(By.TAG_NAME, "h1").text, v.current_url)
        drain(v)
        v.get(URL + f"/ui/p/{PROJECT}/models")
        models = links(v, f"/ui/p/{PROJECT}/models/")
        if models:
            v.get(models[0])
            check("a viewer gets no promote form", not v.find_elements(By.CSS_SELECTOR, "form[action$='/promote']"), "form shown")
            # Their own session's CSRF token, a maintainer's form: refused by role.
            navigating(v, lambda: v.execute_script(
                "var t=document.querySelector('input[name=csrf]').value;"
                "var f=document.createElement('form'); f.method='post'; f.action=location.pathname+'/promote';"
                "[['csrf',t],['alias','production'],['version','1']].forEach(function(kv){var i=document.createElement('input');"
                "i.type='hidden'; i.name=kv[0]; i.value=kv[1]; f.appendChild(i);}); document.body.appendChild(f); f.submit();"
            ))
            check("a viewer cannot submit a maintainer's form", "Not allowed" in v.find_element(By.TAG_NAME, "h1").text, v.page_source[:300])
        drain(v)
    finally:
        v.quit()

    if failures:
        print(f"{len(failures)} UI check(s) failed", file=sys.stderr)
        sys.exit(1)
    print("ui: all checks passed")


if __name__ == "__main__":
    main()
