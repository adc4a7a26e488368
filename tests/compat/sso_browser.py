"""Single sign-on in the web UI, in a real browser (Debian's Chromium, Selenium).

    sso_browser.py <qanat url> <admin token> <state dir of the provider>

The server trusts the provider of tests/compat/sso.sh with session_check_secs = 2;
the provider knows this server's callback. A page asked for without a session leads
to the login form; "Log in with single sign-on" goes to the provider, whose login
form is filled as dave (group fraud-editors); the browser comes back to the page it
asked for, as dave, an editor of fraud. Then the provider disables dave: within the
session check the next page load refuses the session and shows the login form. The
audit log holds the login with the provider's issuer and subject.
"""

import json
import os
import sys
import time
import urllib.request

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("QANAT_URL", sys.argv[1])
os.environ.setdefault("QANAT_ADMIN_TOKEN", sys.argv[2])
os.environ.setdefault("QANAT_VIEWER_TOKEN", "unused")
from ui_browser import browser  # noqa: E402

URL, ADMIN, STATE = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
failures = []


def check(what, good, detail=""):
    print(("ok   " if good else "FAIL ") + what + ("" if good else f": {detail}"), flush=True)
    if not good:
        failures.append(what)


def api(path):
    req = urllib.request.Request(URL + path, headers={"Authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def users(change=None):
    path = os.path.join(STATE, "users.json")
    with open(path) as f:
        u = json.load(f)
    if change:
        change(u)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(u, f)
        os.replace(tmp, path)
    return u


def main():
    users(lambda u: u.__setitem__("dave", {"password": "pw-dave", "email": "dave@example.com",
                                           "name": "Dave", "groups": ["fraud-editors"]}))
    d = browser()
    try:
        # A callback whose state is not the one this browser's login sent (a forged or
        # replayed login) is refused, and so is one with no login begun at all.
        d.get(URL + "/ui/login/sso?next=/ui/")
        WebDriverWait(d, 30).until(lambda d: d.find_elements(By.ID, "username"))
        d.get(URL + "/ui/login/sso/callback?code=stolen&state=" + "A" * 43)
        check("a callback with another login's state is refused as forged",
              "forged or replayed" in d.page_source, d.page_source[:400])
        d.get(URL + "/ui/login/sso/callback?code=stolen&state=" + "A" * 43)
        check("the refused login's state is spent: the same callback again has no login to finish",
              "log in again" in d.page_source and "forged" not in d.page_source, d.page_source[:400])
        d.delete_all_cookies()
        d.get(URL + "/ui/p/fraud/experiments")
        check("a page asks for a login first", "/ui/login" in d.current_url, d.current_url)
        link = d.find_elements(By.ID, "sso")
        check("the login page offers single sign-on", bool(link), d.page_source[:400])
        link[0].click()
        WebDriverWait(d, 30).until(lambda d: d.find_elements(By.ID, "username"))
        check("the browser is at the provider's login form", "/interaction/" in d.current_url, d.current_url)
        d.find_element(By.ID, "username").send_keys("dave")
        d.find_element(By.ID, "password").send_keys("pw-dave")
        d.find_element(By.ID, "login").click()
        WebDriverWait(d, 30).until(lambda d: d.current_url.startswith(URL + "/ui/p/"))
        check("back at the page asked for, logged in", d.current_url.endswith("/ui/p/fraud/experiments"),
              d.current_url)
        body = d.find_element(By.TAG_NAME, "body").text
        check("the page names dave", "dave" in body, body[:300])
        cookies = {c["name"]: c for c in d.get_cookies()}
        s = cookies.get("qanat_session")
        check("the session cookie is HttpOnly", bool(s) and s.get("httpOnly") is True, s)
        check("the login's own cookie is gone", "qanat_sso" not in cookies, list(cookies))
        # The editor's form is there (fraud-editors → editor of fraud).
        d.get(URL + "/ui/p/fraud/experiments")
        check("dave sees fraud's experiments page", "fraud" in d.title or "Experiments" in d.page_source,
              d.title)

        audit = api("/api/v1/audit?action=ui.login&limit=50")
        entries = [e for e in audit if e.get("actor") == "dave" and e.get("outcome") == "success"]
        detail = entries[-1].get("detail", "") if entries else ""
        check("the login is audited with the provider's issuer and subject",
              "single sign-on" in detail and "sso issuer http://127.0.0.1" in detail and "subject dave" in detail,
              entries)

        # The provider disables dave: the session's next check at the provider ends it.
        users(lambda u: u["dave"].__setitem__("disabled", True))
        time.sleep(3)
        d.get(URL + "/ui/p/fraud/experiments")
        check("once the provider disables dave, the session ends at its next check",
              "/ui/login" in d.current_url, d.current_url)
        denied = api("/api/v1/audit?outcome=denied&limit=200")
        check("the ended session is audited with the provider's answer",
              any("no longer accepts this session" in e.get("detail", "") for e in denied),
              [e.get("detail") for e in denied][-5:])
    finally:
        d.quit()
        users(lambda u: u.pop("dave", None))
    if failures:
        print(f"sso browser: {len(failures)} check(s) failed: {failures}")
        sys.exit(1)
    print("sso browser: all checks passed")


if __name__ == "__main__":
    main()
