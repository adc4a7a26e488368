"""Single sign-on through the API: a real OpenID provider's access tokens (the
oidc-provider package on Node, tests/compat/oidc) used as bearer tokens with Qanat's
API and with the unchanged `mlflow` client, the provider's groups as roles, and every
token the server must not accept refused with 401 and audited.

    sso_api.py <qanat url> <admin token> <issuer> <state dir> <other issuer>

The provider must run with leeway 0 on Qanat's side (security.oidc.leeway_secs = 0),
users alice (ml-admins), bob (fraud-editors) and carol (fraud-editors) in users.json,
and a second provider at <other issuer> (another issuer, its own keys). Steps that
restart the provider (key rotation) are driven by sso.sh through the files
`rotate.request` / `rotate.done` in the state dir.
"""

import base64
import json
import os
import subprocess
import sys
import time
import re
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "oidc"))
import check as op  # noqa: E402

URL, ADMIN, ISSUER, STATE, OTHER = sys.argv[1:6]
failures = []


def result(what, good, detail=""):
    print(("ok   " if good else "FAIL ") + what + ("" if good else f": {detail}"), flush=True)
    if not good:
        failures.append(what)


def call(method, path, token, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, {"raw": raw.decode(errors="replace")}


def provider(issuer):
    c = op.Checks(issuer, STATE, op.DEFAULT_REDIRECT_URI)
    status, c.disc = op.Browser().json("GET", issuer + "/.well-known/openid-configuration")
    assert status == 200, f"discovery of {issuer}: {status}"
    return c


def login(c, user, client="qanat", extra=None):
    """The authorization code flow with PKCE as `user`; the provider's tokens."""
    query, verifier, _ = c.authorize(op.Browser(), client, (user, f"pw-{user}"), extra)
    status, tokens = c.token(
        {"grant_type": "authorization_code", "code": query["code"],
         "redirect_uri": c.redirect_uri, "code_verifier": verifier},
        c.basic(client, "qanat-secret"))
    assert status == 200, f"token endpoint: {status} {tokens}"
    return tokens


def b64(obj):
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def refused(what, token):
    """`token` is refused with 401 (a read anyone signed in may make), and the refusal
    is in the audit log."""
    status, body = call("GET", "/api/v1/projects", token)
    result(f"{what}: refused with 401", status == 401, f"{status} {body}")
    return body.get("message", "") if isinstance(body, dict) else ""


def confirm_device(c, user_code, login):
    """Confirms a device login's code at the provider's device page, as `login`."""
    browser = op.Browser()
    uri = c.disc["issuer"] + "/device"
    status, _, body = browser.request("GET", uri)
    page = op.parse_page(body)
    form = next(f for f in page.forms if any(i.get("name") == "user_code" for i in f["inputs"]))
    fields = {i["name"]: i.get("value", "") for i in form["inputs"] if i.get("name")}
    fields["user_code"] = user_code
    action = urllib.parse.urljoin(uri, form["attrs"].get("action") or "")
    return op.drive(browser, action, login=login, method="POST", form=fields)


def qanat(*args, timeout=120):
    return subprocess.run([os.environ["QANAT_BIN"], *args], capture_output=True, text=True, timeout=timeout)


def credentials():
    with open(os.environ["QANAT_CREDENTIALS"]) as f:
        return json.load(f)


def expire_cli_token():
    """Makes the CLI's stored access token due for renewal."""
    creds = credentials()
    creds["servers"][URL.rstrip("/")]["sso"]["expires_at"] = 0
    path = os.environ["QANAT_CREDENTIALS"]
    with open(path, "w") as f:
        json.dump(creds, f)


def cli_login(idp):
    """`qanat login --sso`: the device flow, confirmed at the provider as dave."""
    proc = subprocess.Popen([os.environ["QANAT_BIN"], "login", "--sso", "--server", URL],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    code, lines = None, []
    for line in proc.stderr:
        lines.append(line)
        m = re.search(r"confirm the code (\S+)", line)
        if m:
            code = m.group(1)
            break
    result("qanat login --sso prints a code to confirm at the provider", code is not None, "".join(lines))
    if code is None:
        proc.kill()
        return
    page = confirm_device(idp, code, ("dave", "pw-dave"))
    result("dave confirms the code at the provider's device page",
           page[0] == "page" and 'id="success"' in page[3], page[:3])
    rest = proc.stderr.read()
    proc.wait(timeout=120)
    result("qanat login --sso logs dave in", proc.returncode == 0 and "as dave" in rest, rest[-600:])
    stored = credentials()["servers"].get(URL.rstrip("/"), {})
    result("the stored login is the provider's session (a refresh token), no password",
           bool(stored.get("sso", {}).get("refresh_token")) and "pw-dave" not in json.dumps(stored),
           list(stored))
    who = qanat("whoami", "-o", "json")
    result("qanat whoami, with the provider's token: dave", who.returncode == 0 and '"dave"' in who.stdout,
           who.stderr[-400:])
    before = stored.get("token")
    expire_cli_token()
    who = qanat("whoami", "-o", "json")
    after = credentials()["servers"][URL.rstrip("/")].get("token")
    result("an expiring token is renewed at the provider with the refresh token",
           who.returncode == 0 and after != before, who.stderr[-400:])
    users = idp.read_users()
    users["dave"]["disabled"] = True
    idp.write_users(users)
    expire_cli_token()
    who = qanat("whoami")
    result("once the provider disables dave, the CLI's renewal is refused with a clear message",
           who.returncode != 0 and "no longer renews your single sign-on session" in who.stderr,
           f"{who.returncode} {who.stderr[-400:]}")
    users = idp.read_users()
    users.pop("dave", None)
    idp.write_users(users)


def main():
    idp = provider(ISSUER)
    users = idp.read_users()
    users["dave"] = {"password": "pw-dave", "email": "dave@example.com", "name": "Dave",
                     "groups": ["fraud-editors"]}
    idp.write_users(users)

    # The admin makes the project the groups map to.
    status, _ = call("POST", "/api/v1/projects", ADMIN, {"name": "fraud", "allowed_regions": ["uae-north"]})
    result("the admin creates project fraud", status in (200, 201), status)

    # alice (ml-admins → global admin): her token works with the API and with the
    # unchanged mlflow client.
    alice = login(idp, "alice")["access_token"]
    status, me = call("GET", "/api/v1/whoami", alice)
    who = me if isinstance(me, dict) else {}
    result("the provider's token is a bearer token: whoami is alice", status == 200 and who.get("name") == "alice", f"{status} {me}")
    result("ml-admins maps to a global admin", who.get("is_admin") is True, me)
    env = dict(os.environ, MLFLOW_TRACKING_URI=URL, MLFLOW_TRACKING_TOKEN=alice)
    script = (
        "import mlflow\n"
        "mlflow.set_experiment('sso')\n"
        "with mlflow.start_run(run_name='with the provider token') as r:\n"
        "    mlflow.log_param('who', 'alice')\n"
        "    mlflow.log_metric('loss', 0.5)\n"
        "print(r.info.run_id)\n"
    )
    proc = subprocess.run([os.environ["MLFLOW_PYTHON"], "-c", script], env=env, capture_output=True, text=True, timeout=300)
    result("MLFLOW_TRACKING_TOKEN=<the provider's token>: the mlflow client logs a run", proc.returncode == 0,
           proc.stderr[-800:])

    # bob (fraud-editors → editor of fraud): writes there, sees nothing else.
    bob = login(idp, "bob")["access_token"]
    status, exp = call("POST", "/mlflow/fraud/api/2.0/mlflow/experiments/create", bob, {"name": "bob-exp"})
    result("fraud-editors maps to editor of fraud: bob creates an experiment there", status == 200, f"{status} {exp}")
    status, projects = call("GET", "/api/v1/projects", bob)
    names = [p.get("name") for p in projects] if isinstance(projects, list) else projects
    result("bob sees only the projects his groups give him", names == ["fraud"], names)

    # The provider moves bob to the viewers: his next login's token is a viewer's.
    users = idp.read_users()
    users["bob"]["groups"] = ["fraud-viewers"]
    idp.write_users(users)
    bob2 = login(idp, "bob")["access_token"]
    status, body = call("POST", "/mlflow/fraud/api/2.0/mlflow/experiments/create", bob2, {"name": "bob-exp-2"})
    result("a group change takes effect at the next login (viewer: 403)", status == 403, f"{status} {body}")

    # The inference routes (Open Inference Protocol) take the provider's tokens too,
    # authorized per project like every route.
    status, index = call("POST", "/oip/fraud/v2/repository/index", bob2, {})
    result("the provider's token on the OIP routes: bob lists fraud's models", status == 200 and isinstance(index, list),
           f"{status} {index}")
    status, body = call("POST", "/oip/fraud/v2/models/none/infer", bob2,
                        {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [1.0]}]})
    result("an inference call with the provider's token is authorized, then answered 404 for a model that is not there",
           status == 404, f"{status} {body}")
    status, body = call("POST", "/oip/default/v2/repository/index", bob2, {})
    result("the provider's token on another project's OIP routes: 404 as for one that does not exist",
           status == 404, f"{status} {body}")

    # Tokens the server must refuse.
    other_aud = login(idp, "carol", extra={"resource": "urn:other"})["access_token"]
    refused("a token for another audience", other_aud)
    header, payload, sig = bob2.split(".")
    claims = json.loads(op.b64url_decode(payload))
    claims["groups"] = ["ml-admins"]
    refused("a token with a tampered payload (bad signature)", f"{header}.{b64(claims)}.{sig}")
    refused("an unsigned token (alg none)", f"{b64({'alg': 'none', 'typ': 'JWT'})}.{payload}.")
    short = login(idp, "carol", client="qanat-short")["access_token"]
    status, _ = call("GET", "/api/v1/whoami", short)
    result("a short-lived token works while it lives", status == 200, status)
    time.sleep(3.5)
    refused("an expired token", short)
    elsewhere = provider(OTHER)
    refused("a token of another issuer", login(elsewhere, "carol")["access_token"])

    # Key rotation: the provider restarts with new keys (sso.sh does it on request).
    before = login(idp, "carol")["access_token"]
    status, _ = call("GET", "/api/v1/whoami", before)
    result("carol's token works before the rotation", status == 200, status)
    open(os.path.join(STATE, "rotate.request"), "w").close()
    for _ in range(300):
        if os.path.exists(os.path.join(STATE, "rotate.done")):
            break
        time.sleep(0.1)
    idp = provider(ISSUER)
    after = login(idp, "carol")["access_token"]
    status, me = call("GET", "/api/v1/whoami", after)
    result("after the rotation, a token of the new key is accepted (keys fetched again)", status == 200, f"{status} {me}")
    # `before` was accepted earlier and is remembered for a second at most.
    time.sleep(1.5)
    refused("a token signed with the retired key", before)

    # The CLI's single sign-on: the device flow, renewal, and a leaver refused.
    cli_login(idp)

    # Every entry of a person the provider vouches for names its issuer and subject,
    # and which of grant and groups gave the role.
    status, audit = call("GET", "/api/v1/audit?actor=bob&limit=200", ADMIN)
    details = [e.get("detail", "") for e in audit] if isinstance(audit, list) else []
    result("bob's audit entries carry the provider's issuer and subject",
           bool(details) and all(f"sso issuer {ISSUER} subject bob" in d for d in details), details[-3:])
    result("bob's role in fraud is audited as the provider groups' decision",
           any("by the provider's group(s) fraud-" in d for d in details), details[-3:])
    status, audit = call("GET", "/api/v1/audit?actor=admin&limit=200", ADMIN)
    details = [e.get("detail", "") for e in audit] if isinstance(audit, list) else []
    result("the local admin's use under single sign-on is audited as break-glass",
           any("BREAK-GLASS" in d for d in details), details[-3:])

    # Disabled in Qanat: refused at once, whatever the provider signs.
    status, _ = call("PATCH", "/api/v1/users/carol", ADMIN, {"disabled": True})
    result("the admin disables carol in Qanat", status == 200, status)
    refused("a disabled user's valid token", after)

    # Every refusal is audited, with the reason.
    status, audit = call("GET", "/api/v1/audit?outcome=denied&limit=1000", ADMIN)
    details = " | ".join(e.get("detail", "") for e in audit) if isinstance(audit, list) else str(audit)
    for reason in ["not for this server", "signature does not verify", "'none'", "expired", "issued by",
                   "does not publish", "disabled"]:
        result(f"audited: {reason}", reason in details, details[-600:])

    if failures:
        print(f"sso: {len(failures)} check(s) failed: {failures}")
        sys.exit(1)
    print("sso: all checks passed")


if __name__ == "__main__":
    main()
