"""Registry webhooks through the real MLflow client against a live Qanat server: CRUD,
signed deliveries received and verified on a local HTTP receiver, a retry after the
receiver was down, the test endpoint, the delivery history, and who may manage them.

Environment: MLFLOW_TRACKING_URI / MLFLOW_TRACKING_TOKEN for an editor of the default
project, QANAT_URL (server root), QANAT_MAINTAINER_TOKEN (a maintainer). The server
allows http and private addresses for webhooks (QANAT_EVENTS_WEBHOOK_SCHEMES,
QANAT_EVENTS_ALLOW_PRIVATE_NETWORKS), since the receiver is on 127.0.0.1.
"""

import base64
import hashlib
import hmac
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests
from mlflow import MlflowClient
from mlflow.entities.webhook import WebhookAction, WebhookEntity, WebhookEvent
from mlflow.exceptions import MlflowException
from runner import client_as, free_port, main, test

SECRET = "compat-secret"
STATE = {}


class Receiver:
    """An HTTP server on 127.0.0.1 that keeps every POST it gets."""

    def __init__(self, port=0):
        got = self.got = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                # Header names are case-insensitive; keep them lower-cased.
                headers = {k.lower(): v for k, v in self.headers.items()}
                got.append({"headers": headers, "body": body, "path": self.path})
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path="/hook"):
        return f"http://127.0.0.1:{self.port}{path}"

    def wait(self, pred, seconds=20):
        deadline = time.time() + seconds
        while time.time() < deadline:
            hits = [g for g in self.got if pred(g)]
            if hits:
                return hits
            time.sleep(0.1)
        raise AssertionError(f"no matching delivery within {seconds}s; got {self.got}")

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def verify(delivery, secret):
    h = delivery["headers"]
    signed = f"{h['x-mlflow-delivery-id']}.{h['x-mlflow-timestamp']}.{delivery['body']}"
    want = base64.b64encode(
        hmac.new(secret.encode(), signed.encode(), hashlib.sha256).digest()
    ).decode()
    return hmac.compare_digest(h.get("x-mlflow-signature", ""), f"v1,{want}")


def maintainer():
    """A client with the maintainer's token."""
    return client_as("QANAT_MAINTAINER_TOKEN")


def native(path):
    r = requests.get(
        f"{os.environ['QANAT_URL']}/api/v1/projects/default{path}",
        headers={"Authorization": f"Bearer {os.environ['QANAT_MAINTAINER_TOKEN']}"},
        timeout=10,
    )
    r.raise_for_status()
    return r.json()


@test
def a_maintainer_creates_a_webhook_and_its_secret_is_never_returned():
    rx = STATE["rx"] = Receiver()
    with maintainer() as c:
        hook = c.create_webhook(
            name="compat-hook",
            url=rx.url(),
            events=[
                WebhookEvent(WebhookEntity.REGISTERED_MODEL, WebhookAction.CREATED),
                "model_version.created",
                "model_version_tag.set",
                "model_version_alias.created",
            ],
            secret=SECRET,
            description="compat receiver",
        )
        STATE["hook"] = hook.webhook_id
        assert hook.secret is None
        got = c.get_webhook(hook.webhook_id)
        assert got.name == "compat-hook" and got.description == "compat receiver"
        assert len(got.events) == 4
        assert any(w.webhook_id == hook.webhook_id for w in c.list_webhooks())
    raw = requests.get(
        f"{os.environ['QANAT_URL']}/api/2.0/mlflow/webhooks/{hook.webhook_id}",
        headers={"Authorization": f"Bearer {os.environ['QANAT_MAINTAINER_TOKEN']}"},
        timeout=10,
    ).json()
    assert SECRET not in json.dumps(raw), raw


@test
def editors_cannot_see_or_manage_webhooks():
    c = MlflowClient()
    for call in (
        lambda: c.list_webhooks(),
        lambda: c.create_webhook(name="x", url="http://127.0.0.1:1/", events=["model_version.created"]),
    ):
        try:
            call()
        except MlflowException as e:
            assert e.error_code == "PERMISSION_DENIED", e
        else:
            raise AssertionError("an editor managed webhooks")


@test
def registry_changes_are_delivered_signed_with_the_secret():
    rx, c = STATE["rx"], MlflowClient()
    c.create_registered_model("hooked-model", tags={"team": "risk"}, description="d")
    d = rx.wait(lambda g: '"registered_model"' in g["body"])[0]
    assert verify(d, SECRET), d["headers"]
    assert not verify(d, "wrong-secret")
    body = json.loads(d["body"])
    assert body["entity"] == "registered_model" and body["action"] == "created"
    assert body["data"] == {"name": "hooked-model", "tags": {"team": "risk"}, "description": "d"}
    assert body["workspace"] == "default"
    age = abs(time.time() - int(d["headers"]["x-mlflow-timestamp"]))
    assert age < 120, age

    with open("/tmp/qanat-compat-model.txt", "w") as f:
        f.write("weights")
    run = c.create_run(c.get_experiment_by_name("Default").experiment_id)
    c.log_artifact(run.info.run_id, "/tmp/qanat-compat-model.txt", "model")
    mv = c.create_model_version("hooked-model", f"runs:/{run.info.run_id}/model", run.info.run_id)
    c.set_model_version_tag("hooked-model", mv.version, "validated", "yes")
    with maintainer() as m:
        m.set_registered_model_alias("hooked-model", "champion", mv.version)
    created = rx.wait(lambda g: '"model_version"' in g["body"])[0]
    data = json.loads(created["body"])["data"]
    assert data["name"] == "hooked-model" and data["version"] == "1", data
    assert data["run_id"] == run.info.run_id
    tag = json.loads(rx.wait(lambda g: '"model_version_tag"' in g["body"])[0]["body"])
    assert tag["action"] == "set" and tag["data"]["key"] == "validated"
    alias = json.loads(rx.wait(lambda g: '"model_version_alias"' in g["body"])[0]["body"])
    assert alias["data"] == {"name": "hooked-model", "alias": "champion", "version": "1"}
    for g in rx.got:
        assert verify(g, SECRET)
    # Deleting a tag is not subscribed: nothing arrives for it.
    c.delete_model_version_tag("hooked-model", mv.version, "validated")
    time.sleep(1.5)
    assert not [g for g in rx.got if '"deleted"' in g["body"]]


@test
def a_delivery_is_retried_after_the_receiver_was_down():
    port = free_port()
    with maintainer() as m:
        hook = m.create_webhook(
            name="late-receiver",
            url=f"http://127.0.0.1:{port}/late",
            events=["registered_model.created"],
            secret="late-secret",
        )
    MlflowClient().create_registered_model("retried-model")
    time.sleep(0.5)  # the first attempt finds nobody listening
    rx = Receiver(port)
    try:
        d = rx.wait(lambda g: "retried-model" in g["body"], seconds=30)[0]
        assert verify(d, "late-secret")
        # The history shows the failed attempt(s), then the delivered one.
        history = native(f"/webhooks/{hook.webhook_id}/deliveries")["deliveries"]
        for _ in range(50):
            if history and history[0]["status"] == "delivered":
                break
            time.sleep(0.1)
            history = native(f"/webhooks/{hook.webhook_id}/deliveries")["deliveries"]
        first = history[0]
        assert first["status"] == "delivered", first
        assert first["attempts"] >= 2, first
        assert first["attempt_log"][0].get("error"), first
        assert first["delivery_id"] == d["headers"]["x-mlflow-delivery-id"]
    finally:
        rx.close()


@test
def the_test_endpoint_sends_a_signed_example():
    rx = STATE["rx"]
    with maintainer() as m:
        result = m.test_webhook(STATE["hook"], event="model_version_alias.created")
    assert result.success and result.response_status == 200, result
    d = rx.wait(lambda g: "example_alias" in g["body"])[0]
    assert verify(d, SECRET)


@test
def a_disabled_webhook_gets_nothing_and_a_deleted_one_is_gone():
    rx = STATE["rx"]
    with maintainer() as m:
        m.update_webhook(STATE["hook"], status="DISABLED")
        before = len(rx.got)
        MlflowClient().create_registered_model("quiet-model")
        time.sleep(1.5)
        assert len(rx.got) == before
        m.delete_webhook(STATE["hook"])
        try:
            m.get_webhook(STATE["hook"])
        except MlflowException as e:
            assert e.error_code == "RESOURCE_DOES_NOT_EXIST"
            assert f"Webhook with ID {STATE['hook']} not found" in e.message
        else:
            raise AssertionError("a deleted webhook was returned")
    rx.close()


if __name__ == "__main__":
    main()
