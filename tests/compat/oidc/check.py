#!/usr/bin/env python3
"""Self-test of the test OpenID Connect provider (tests/compat/oidc).

    check.py <issuer-url> <state-dir> [--redirect-uri URI]
             [--save-access-token FILE] [--stale-token FILE]

Expects a provider started by start.sh with the default clients and a
users.json holding at least
    alice: password pw-alice, groups ["ml-admins"]
    bob:   password pw-bob,   groups ["fraud-editors"]
(users.json is modified during the run, alice is disabled for a while, and
restored at the end).

--save-access-token FILE   write alice's access token (a JWT) to FILE
--stale-token FILE         the token in FILE was signed before a key rotation:
                           its kid must be gone from the JWKS, its signature
                           must not verify, and userinfo must refuse it

Python 3 standard library only. One line per check; exits 1 on the first
failure.
"""

import argparse
import base64
import hashlib
import html.parser
import http.cookiejar
import json
import os
import secrets
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

DEFAULT_REDIRECT_URI = "http://127.0.0.1:8080/ui/login/sso/callback"
SCOPE = "openid profile email groups offline_access"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


class CheckFailed(Exception):
    pass


def ok(name, detail=""):
    print(f"ok   {name}{': ' + detail if detail else ''}", flush=True)


def expect(cond, what):
    if not cond:
        raise CheckFailed(what)


# --------------------------------------------------------------------- HTTP


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class Browser:
    """Cookie-keeping HTTP client that never follows redirects by itself."""

    def __init__(self):
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}),
            urllib.request.HTTPCookieProcessor(self.jar),
            _NoRedirect(),
        )

    def request(self, method, url, form=None, headers=None):
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        if data is not None:
            req.add_header("Content-Type", "application/x-www-form-urlencoded")
        try:
            with self.opener.open(req, timeout=30) as resp:
                return resp.status, resp.headers, resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as err:
            body = err.read().decode("utf-8", "replace") if err.fp else ""
            return err.code, err.headers, body

    def json(self, method, url, form=None, headers=None):
        status, _, body = self.request(method, url, form, headers)
        try:
            return status, json.loads(body)
        except ValueError:
            raise CheckFailed(f"{method} {url}: HTTP {status}, not JSON: {body[:300]!r}")


class _FormParser(html.parser.HTMLParser):
    """Collects forms: attributes, inputs and buttons (with their ids)."""

    def __init__(self):
        super().__init__()
        self.forms = []
        self.ids = set()
        self.buttons = []  # (attrs) of every button, inside a form or not

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "form":
            self.forms.append({"attrs": a, "inputs": []})
        elif tag == "input" and self.forms:
            self.forms[-1]["inputs"].append(a)
        elif tag == "button":
            self.buttons.append(a)


def parse_page(body):
    parser = _FormParser()
    parser.feed(body)
    return parser


def is_login_page(body):
    return 'id="username"' in body and 'id="password"' in body


def submit_login(browser, url, body, username, password):
    """Posts the login form found on the page at url; returns the response."""
    page = parse_page(body)
    expect({"username", "password", "login"} <= page.ids,
           "login page has inputs #username, #password and button #login")
    form = next((f for f in page.forms
                 if {i.get("name") for i in f["inputs"]} >= {"username", "password"}), None)
    expect(form is not None, "login page has a form with username and password inputs")
    expect(form["attrs"].get("method", "").lower() == "post", "login form uses method=post")
    action = urllib.parse.urljoin(url, form["attrs"].get("action") or url)
    return browser.request("POST", action, {"username": username, "password": password})


def drive(browser, url, stop_prefix=None, login=None, method="GET", form=None):
    """Follows redirects like a browser, filling the login form with login
    (username, password) when it shows up. Returns ("redirect", location) on a
    redirect to stop_prefix (not followed), else ("page", status, url, body)."""
    logged_in = False
    for _ in range(25):
        status, headers, body = browser.request(method, url, form)
        method, form = "GET", None
        if status in (301, 302, 303, 307, 308):
            location = urllib.parse.urljoin(url, headers["Location"])
            if stop_prefix and location.startswith(stop_prefix):
                return ("redirect", location)
            url = location
            continue
        if status == 200 and is_login_page(body) and login and not logged_in:
            logged_in = True
            status, headers, body = submit_login(browser, url, body, *login)
            if status in (301, 302, 303, 307, 308):
                location = urllib.parse.urljoin(url, headers["Location"])
                if stop_prefix and location.startswith(stop_prefix):
                    return ("redirect", location)
                url = location
                continue
            return ("page", status, url, body)
        return ("page", status, url, body)
    raise CheckFailed(f"too many redirects, last at {url}")


# ---------------------------------------------------------------------- JWT


def b64url_decode(value):
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


def jwt_parts(token):
    parts = token.split(".")
    expect(len(parts) == 3, f"a JWS compact token (3 parts), got {len(parts)} parts")
    return json.loads(b64url_decode(parts[0])), json.loads(b64url_decode(parts[1]))


# DER prefix of the DigestInfo for SHA-256 (RFC 8017, section 9.2).
_SHA256_DIGEST_INFO = bytes.fromhex("3031300d060960864801650304020105000420")


def rs256_verifies(token, jwks):
    """RSASSA-PKCS1-v1_5 with SHA-256 verification against the key of the
    token's kid; False when that kid is not in the JWKS."""
    h, p, s = token.split(".")
    header = json.loads(b64url_decode(h))
    key = next((k for k in jwks["keys"] if k.get("kid") == header.get("kid")), None)
    if key is None or header.get("alg") != "RS256" or key.get("kty") != "RSA":
        return False
    n = int.from_bytes(b64url_decode(key["n"]), "big")
    e = int.from_bytes(b64url_decode(key["e"]), "big")
    k = (n.bit_length() + 7) // 8
    sig = int.from_bytes(b64url_decode(s), "big")
    if sig >= n:
        return False
    em = pow(sig, e, n).to_bytes(k, "big")
    t = _SHA256_DIGEST_INFO + hashlib.sha256(f"{h}.{p}".encode()).digest()
    return em == b"\x00\x01" + b"\xff" * (k - len(t) - 3) + b"\x00" + t


# ------------------------------------------------------------------- checks


class Checks:
    def __init__(self, issuer, state_dir, redirect_uri):
        self.issuer = issuer.rstrip("/")
        self.state_dir = state_dir
        self.redirect_uri = redirect_uri
        self.users_file = os.path.join(state_dir, "users.json")
        self.disc = None
        self.jwks = None

    # helpers -------------------------------------------------------------

    def write_users(self, users):
        tmp = f"{self.users_file}.check.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(users, fh, indent=2)
        os.replace(tmp, self.users_file)

    def read_users(self):
        with open(self.users_file, encoding="utf-8") as fh:
            return json.load(fh)

    @staticmethod
    def basic(client_id, secret):
        raw = f"{urllib.parse.quote(client_id, safe='')}:{urllib.parse.quote(secret, safe='')}"
        return {"Authorization": "Basic " + base64.b64encode(raw.encode()).decode()}

    def authorize(self, browser, client_id, login, extra=None):
        """Authorization code request with PKCE; returns (query of the
        redirect to the redirect URI, code_verifier, nonce)."""
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(
            hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        state, nonce = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": self.redirect_uri,
            "scope": SCOPE,
            "state": state,
            "nonce": nonce,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        params.update(extra or {})
        url = self.disc["authorization_endpoint"] + "?" + urllib.parse.urlencode(params)
        result = drive(browser, url, stop_prefix=self.redirect_uri, login=login)
        if result[0] != "redirect":
            _, status, at, body = result
            raise CheckFailed(f"no redirect to the redirect URI; HTTP {status} at {at}: {body[:400]!r}")
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(result[1]).query))
        expect(query.get("state") == state, "state comes back unchanged")
        expect(query.get("iss") == self.issuer, f"iss in the authorization response ({query.get('iss')})")
        return query, verifier, nonce

    def token(self, form, headers=None):
        return Browser().json("POST", self.disc["token_endpoint"], form, headers)

    def check_access_token(self, token, *, sub, client_id, groups, aud, ttl):
        header, claims = jwt_parts(token)
        expect(header.get("alg") == "RS256", f"access token alg RS256 ({header.get('alg')})")
        expect(header.get("typ") in ("at+jwt", "application/at+jwt"), f"access token typ at+jwt ({header.get('typ')})")
        expect(rs256_verifies(token, self.jwks), "access token signature verifies against the JWKS")
        expect(claims.get("iss") == self.issuer, f"access token iss ({claims.get('iss')})")
        aud_list = claims.get("aud") if isinstance(claims.get("aud"), list) else [claims.get("aud")]
        expect(aud_list == [aud], f"access token aud == {aud!r} ({claims.get('aud')!r})")
        expect(claims.get("sub") == sub, f"access token sub == {sub!r} ({claims.get('sub')!r})")
        expect(claims.get("client_id") == client_id, f"access token client_id ({claims.get('client_id')})")
        expect(claims.get("preferred_username") == sub, "access token preferred_username")
        expect(claims.get("groups") == groups, f"access token groups == {groups} ({claims.get('groups')})")
        scopes = set(str(claims.get("scope", "")).split())
        expect({"openid", "groups"} <= scopes, f"access token scope has openid and groups ({claims.get('scope')!r})")
        expect(isinstance(claims.get("iat"), int) and isinstance(claims.get("exp"), int), "access token iat and exp")
        expect(claims["exp"] - claims["iat"] == ttl, f"access token lifetime {ttl}s (exp - iat = {claims['exp'] - claims['iat']})")
        expect(claims.get("jti"), "access token jti")
        return claims

    def check_id_token(self, token, *, sub, client_id, groups, nonce=None):
        header, claims = jwt_parts(token)
        expect(rs256_verifies(token, self.jwks), "ID token signature verifies against the JWKS")
        expect(claims.get("iss") == self.issuer, "ID token iss")
        expect(claims.get("aud") == client_id, f"ID token aud == {client_id!r} ({claims.get('aud')!r})")
        expect(claims.get("sub") == sub, "ID token sub")
        if nonce is not None:
            expect(claims.get("nonce") == nonce, "ID token nonce")
        expect(claims.get("groups") == groups, f"ID token groups ({claims.get('groups')})")
        expect(claims.get("preferred_username") == sub, "ID token preferred_username")
        expect(claims.get("email") and claims.get("name"), "ID token email and name")
        expect(claims["exp"] - claims["iat"] == 600, f"ID token lifetime 600s ({claims['exp'] - claims['iat']})")
        return claims

    def userinfo(self, access_token):
        return Browser().json("GET", self.disc["userinfo_endpoint"],
                              headers={"Authorization": f"Bearer {access_token}"})

    def device_flow(self, browser, login, extra=None):
        status, start = Browser().json("POST", self.disc["device_authorization_endpoint"],
                                       {"client_id": "qanat-cli", "scope": SCOPE, **(extra or {})})
        expect(status == 200, f"device authorization HTTP 200 ({status}: {start})")
        for field in ("device_code", "user_code", "verification_uri", "verification_uri_complete", "expires_in"):
            expect(field in start, f"device authorization response has {field}")
        expect(start["expires_in"] == 600, f"device code lives 600s ({start['expires_in']})")
        poll = {"grant_type": DEVICE_GRANT, "device_code": start["device_code"], "client_id": "qanat-cli"}
        status, pending = self.token(poll)
        expect(status == 400 and pending.get("error") == "authorization_pending",
               f"polling before the user acts: authorization_pending ({status} {pending})")

        status, _, body = browser.request("GET", start["verification_uri"])
        expect(status == 200, f"user-code page HTTP 200 ({status})")
        page = parse_page(body)
        form = next((f for f in page.forms if any(i.get("name") == "user_code" for i in f["inputs"])), None)
        expect(form is not None, "user-code page has a form with input name=user_code")
        expect("confirm" in page.ids, "user-code page has button #confirm")
        fields = {i["name"]: i.get("value", "") for i in form["inputs"] if i.get("name")}
        fields["user_code"] = start["user_code"]
        action = urllib.parse.urljoin(start["verification_uri"], form["attrs"].get("action") or "")
        result = drive(browser, action, login=login, method="POST", form=fields)
        expect(result[0] == "page" and result[1] == 200 and 'id="success"' in result[3],
               f"device flow ends on the success page ({result[:3]} {result[-1][:300]!r})")

        for _ in range(10):
            status, tokens = self.token(poll)
            if status == 200:
                return tokens
            expect(tokens.get("error") == "authorization_pending", f"device token poll: {status} {tokens}")
            time.sleep(1)
        raise CheckFailed("device flow: no tokens after polling for 10s")

    # the checks ---------------------------------------------------------------

    def discovery(self):
        status, disc = Browser().json("GET", self.issuer + "/.well-known/openid-configuration")
        expect(status == 200, f"discovery HTTP 200 ({status})")
        expect(disc.get("issuer") == self.issuer, f"discovery issuer == {self.issuer} ({disc.get('issuer')})")
        for field in ("authorization_endpoint", "token_endpoint", "jwks_uri", "device_authorization_endpoint",
                      "userinfo_endpoint", "end_session_endpoint"):
            expect(str(disc.get(field, "")).startswith(self.issuer + "/"), f"discovery has {field}")
        expect("S256" in disc.get("code_challenge_methods_supported", []), "discovery: PKCE S256")
        self.disc = disc
        ok("discovery document", "authorization, token, jwks, device_authorization, userinfo, end_session endpoints")

        status, jwks = Browser().json("GET", disc["jwks_uri"])
        expect(status == 200 and jwks.get("keys"), "JWKS has keys")
        expect(all(k.get("kid") and k.get("kty") == "RSA" for k in jwks["keys"]), "JWKS keys are RSA with a kid")
        expect(not any(field in k for k in jwks["keys"] for field in ("d", "p", "q", "dp", "dq", "qi")),
               "JWKS publishes no private key material")
        self.jwks = jwks
        ok("jwks", "kids " + ", ".join(k["kid"] for k in jwks["keys"]))

    def code_flow(self, save_access_token):
        browser = Browser()
        # wrong password first: the login page comes back with an error
        params = {"response_type": "code", "client_id": "qanat", "redirect_uri": self.redirect_uri,
                  "scope": SCOPE, "state": "s", "code_challenge": "x" * 43, "code_challenge_method": "S256"}
        result = drive(browser, self.disc["authorization_endpoint"] + "?" + urllib.parse.urlencode(params),
                       login=("alice", "wrong-password"))
        expect(result[0] == "page" and result[1] == 401 and 'id="error"' in result[3] and is_login_page(result[3]),
               f"wrong password: login page again with #error, HTTP 401 ({result[:3]})")
        ok("login refused with a wrong password")

        browser = Browser()
        query, verifier, nonce = self.authorize(browser, "qanat", ("alice", "pw-alice"))
        expect("code" in query, f"authorization code in the redirect ({query})")
        ok("authorization code flow with PKCE (alice)", "login form posted, redirect to the redirect URI with code, state and iss")

        # no PKCE: refused (redirect with an error)
        bare = {"response_type": "code", "client_id": "qanat", "redirect_uri": self.redirect_uri,
                "scope": SCOPE, "state": "nopkce"}
        result = drive(browser, self.disc["authorization_endpoint"] + "?" + urllib.parse.urlencode(bare),
                       stop_prefix=self.redirect_uri)
        expect(result[0] == "redirect" and "error=invalid_request" in result[1],
               f"authorization request without PKCE refused ({result[:2]})")
        ok("PKCE required", "request without code_challenge gets invalid_request")

        status, tokens = self.token(
            {"grant_type": "authorization_code", "code": query["code"],
             "redirect_uri": self.redirect_uri, "code_verifier": verifier},
            self.basic("qanat", "qanat-secret"))
        expect(status == 200, f"token endpoint HTTP 200 ({status} {tokens})")
        for field in ("id_token", "access_token", "refresh_token"):
            expect(field in tokens, f"token response has {field}")
        expect(tokens.get("token_type") == "Bearer" and tokens.get("expires_in") == 300,
               f"token_type Bearer, expires_in 300 ({tokens.get('token_type')}, {tokens.get('expires_in')})")
        idt = self.check_id_token(tokens["id_token"], sub="alice", client_id="qanat", groups=["ml-admins"], nonce=nonce)
        at = self.check_access_token(tokens["access_token"], sub="alice", client_id="qanat",
                                     groups=["ml-admins"], aud="qanat", ttl=300)
        ok("code exchange (client_secret_basic)", "id_token, access_token, refresh_token")
        ok("ID token", f"sub={idt['sub']} groups={idt['groups']} email={idt['email']} exp-iat=600")
        ok("access token is a JWT", f"typ=at+jwt aud={at['aud']} groups={at['groups']} scope={at['scope']!r} exp-iat=300")
        if save_access_token:
            with open(save_access_token, "w", encoding="utf-8") as fh:
                fh.write(tokens["access_token"])

        status, info = self.userinfo(tokens["access_token"])
        expect(status == 200 and info.get("sub") == "alice" and info.get("groups") == ["ml-admins"]
               and info.get("email") == "alice@example.com",
               f"userinfo with the access token ({status} {info})")
        ok("userinfo", json.dumps(info, sort_keys=True))

        status, refreshed = self.token({"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]},
                                       self.basic("qanat", "qanat-secret"))
        expect(status == 200 and "access_token" in refreshed, f"refresh grant HTTP 200 ({status} {refreshed})")
        self.check_access_token(refreshed["access_token"], sub="alice", client_id="qanat",
                                groups=["ml-admins"], aud="qanat", ttl=300)
        refresh_token = refreshed.get("refresh_token", tokens["refresh_token"])
        ok("refresh (client_secret_basic)", "new JWT access token for aud qanat")

        status, refreshed = self.token({"grant_type": "refresh_token", "refresh_token": refresh_token,
                                        "client_id": "qanat", "client_secret": "qanat-secret"})
        expect(status == 200 and "access_token" in refreshed, f"refresh with client_secret_post ({status} {refreshed})")
        refresh_token = refreshed.get("refresh_token", refresh_token)
        ok("refresh (client_secret_post)")

        original = self.read_users()
        try:
            users = json.loads(json.dumps(original))
            users["alice"]["disabled"] = True
            self.write_users(users)
            status, refused = self.token({"grant_type": "refresh_token", "refresh_token": refresh_token},
                                         self.basic("qanat", "qanat-secret"))
            expect(status == 400 and refused.get("error") == "invalid_grant",
                   f"refresh for a disabled user refused with invalid_grant ({status} {refused})")
            ok("refresh refused once alice is disabled", f"{refused.get('error')}: {refused.get('error_description')}")

            status, info = self.userinfo(tokens["access_token"])
            expect(status == 401, f"userinfo refused for a disabled user ({status} {info})")
            ok("userinfo refused once alice is disabled")

            # alice still has a session cookie in this browser: she must get
            # the login form again, and the login must fail.
            result = drive(browser, self.disc["authorization_endpoint"] + "?" + urllib.parse.urlencode(
                {**params, "code_challenge": "y" * 43}), stop_prefix=self.redirect_uri, login=("alice", "pw-alice"))
            expect(result[0] == "page" and result[1] == 401 and 'id="error"' in result[3],
                   f"disabled alice cannot log in ({result[:3]})")
            ok("login refused once alice is disabled")
        finally:
            self.write_users(original)

    def device(self):
        browser = Browser()
        tokens = self.device_flow(browser, ("bob", "pw-bob"))
        for field in ("id_token", "access_token", "refresh_token"):
            expect(field in tokens, f"device token response has {field} ({sorted(tokens)})")
        self.check_id_token(tokens["id_token"], sub="bob", client_id="qanat-cli", groups=["fraud-editors"])
        at = self.check_access_token(tokens["access_token"], sub="bob", client_id="qanat-cli",
                                     groups=["fraud-editors"], aud="qanat", ttl=300)
        ok("device flow (qanat-cli, bob)", f"user-code page + login form, tokens polled; aud={at['aud']} groups={at['groups']}")

        status, refreshed = self.token({"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"],
                                        "client_id": "qanat-cli"})
        expect(status == 200 and refreshed.get("refresh_token") not in (None, tokens["refresh_token"]),
               f"public client refresh works and rotates the refresh token ({status} {refreshed})")
        self.check_access_token(refreshed["access_token"], sub="bob", client_id="qanat-cli",
                                groups=["fraud-editors"], aud="qanat", ttl=300)
        ok("refresh (public client qanat-cli)", "refresh token rotated")

        # Same browser (bob's session): no login form this time.
        tokens = self.device_flow(browser, None, {"resource": "urn:other"})
        at = self.check_access_token(tokens["access_token"], sub="bob", client_id="qanat-cli",
                                     groups=["fraud-editors"], aud="other", ttl=300)
        ok("resource urn:other", f"access token aud={at['aud']}")

        status, err = Browser().json("POST", self.disc["device_authorization_endpoint"],
                                     {"client_id": "qanat-cli", "scope": SCOPE, "resource": "urn:unknown"})
        expect(status == 400 and err.get("error") == "invalid_target", f"unknown resource refused ({status} {err})")
        ok("unknown resource refused", "invalid_target")
        return browser

    def no_offline_access(self, browser):
        query, verifier, _ = self.authorize(browser, "qanat", ("bob", "pw-bob"), {"scope": "openid profile groups"})
        status, tokens = self.token(
            {"grant_type": "authorization_code", "code": query["code"],
             "redirect_uri": self.redirect_uri, "code_verifier": verifier},
            self.basic("qanat", "qanat-secret"))
        expect(status == 200 and "access_token" in tokens, f"token HTTP 200 ({status} {tokens})")
        expect("refresh_token" not in tokens, "no refresh token without offline_access")
        self.check_access_token(tokens["access_token"], sub="bob", client_id="qanat",
                                groups=["fraud-editors"], aud="qanat", ttl=300)
        ok("no offline_access, no refresh token", "bob logged in already: no login form; JWT access token for aud qanat")

    def short(self, browser):
        query, verifier, _ = self.authorize(browser, "qanat-short", ("bob", "pw-bob"))
        status, tokens = self.token(
            {"grant_type": "authorization_code", "code": query["code"],
             "redirect_uri": self.redirect_uri, "code_verifier": verifier},
            self.basic("qanat-short", "qanat-secret"))
        expect(status == 200, f"qanat-short token HTTP 200 ({status} {tokens})")
        expect(tokens.get("expires_in") == 2, f"expires_in 2 ({tokens.get('expires_in')})")
        self.check_access_token(tokens["access_token"], sub="bob", client_id="qanat-short",
                                groups=["fraud-editors"], aud="qanat", ttl=2)
        ok("qanat-short access token", "exp - iat = 2")
        status, _ = self.userinfo(tokens["access_token"])
        expect(status == 200, f"userinfo accepts the fresh short token ({status})")
        time.sleep(3)
        status, info = self.userinfo(tokens["access_token"])
        expect(status == 401, f"userinfo refuses the expired short token ({status} {info})")
        ok("qanat-short access token expired after 3s", "userinfo 401")

    def stale(self, path):
        with open(path, encoding="utf-8") as fh:
            token = fh.read().strip()
        header, _ = jwt_parts(token)
        kids = [k["kid"] for k in self.jwks["keys"]]
        expect(header.get("kid") not in kids, f"old kid {header.get('kid')} gone from the JWKS {kids}")
        expect(not rs256_verifies(token, self.jwks), "old token does not verify against the JWKS")
        status, _ = self.userinfo(token)
        expect(status == 401, f"userinfo refuses the old token ({status})")
        ok("token from before the key rotation rejected", f"old kid {header['kid']} not in {kids}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("issuer")
    parser.add_argument("state_dir")
    parser.add_argument("--redirect-uri",
                        default=(os.environ.get("OIDC_REDIRECT_URIS") or DEFAULT_REDIRECT_URI).split(",")[0])
    parser.add_argument("--save-access-token")
    parser.add_argument("--stale-token")
    args = parser.parse_args()

    checks = Checks(args.issuer, args.state_dir, args.redirect_uri)
    try:
        checks.discovery()
        if args.stale_token:
            checks.stale(args.stale_token)
        checks.code_flow(args.save_access_token)
        browser = checks.device()
        checks.no_offline_access(browser)
        checks.short(browser)
    except CheckFailed as err:
        print(f"FAIL {err}", flush=True)
        return 1
    except (urllib.error.URLError, ConnectionRefusedError, ConnectionResetError, TimeoutError) as err:
        print(f"FAIL cannot talk to the provider: {err}", flush=True)
        return 1
    print("all checks passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
