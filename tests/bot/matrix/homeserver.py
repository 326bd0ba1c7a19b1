"""A real Synapse homeserver for the Matrix tests, and the people who talk to the bot on it.

Synapse (PyPI ``matrix-synapse``) is installed into its own virtual environment, never the
project's: ``python tests/bot/matrix/homeserver.py`` does that (``.ci/run`` calls it), at
``~/.cache/chathub-tests/synapse`` or ``$CHATHUB_TEST_SYNAPSE``. ``Homeserver`` starts one
on 127.0.0.1 (SQLite, shared-secret registration, rate limits lifted unless a test sets a
user's own), and ``Person`` is a user over the client-server API (plain HTTP, not the
bot's library).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

__all__ = ["Homeserver", "Person", "synapse_python", "unavailable"]

Json = dict[str, Any]

SERVER_NAME = "localhost"
DEFAULT_HOME = Path.home() / ".cache" / "chathub-tests" / "synapse"
SECRET = "chathub-tests-registration-secret"
_LIFTED = {"per_second": 1000, "burst_count": 1000}


def synapse_python() -> Path:
    home = Path(os.environ.get("CHATHUB_TEST_SYNAPSE", DEFAULT_HOME))
    return home / "bin" / "python"


def unavailable() -> str | None:
    """Why no Synapse can start here (one line), or ``None``."""
    python = synapse_python()
    if not python.exists():
        return f"Synapse is not installed at {python.parent.parent} (python {__file__})"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(data: Path, port: int) -> str:
    limits = "\n".join(
        f"{name}:\n  per_second: {_LIFTED['per_second']}\n  burst_count: {_LIFTED['burst_count']}"
        for name in (
            "rc_message",
            "rc_registration",
            "rc_joins_per_room",
            "rc_3pid_validation",
            "rc_room_creation",
        )
    )
    return f"""
server_name: "{SERVER_NAME}"
pid_file: {data}/homeserver.pid
listeners:
  - port: {port}
    bind_addresses: ['127.0.0.1']
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
database:
  name: sqlite3
  args:
    database: {data}/homeserver.db
log_config: {data}/log.config
media_store_path: {data}/media
registration_shared_secret: "{SECRET}"
report_stats: false
macaroon_secret_key: "chathub-tests-macaroon"
form_secret: "chathub-tests-form"
signing_key_path: {data}/signing.key
trusted_key_servers: []
suppress_key_server_warning: true
enable_metrics: false
presence:
  enabled: false
# The fewest rounds bcrypt takes: each test registers four users, 0.3 s each at the
# default 12 rounds, 0.08 s at 4 (a test password guards nothing).
bcrypt_rounds: 4
{limits}
rc_login:
  address: {{per_second: 1000, burst_count: 1000}}
  account: {{per_second: 1000, burst_count: 1000}}
  failed_attempts: {{per_second: 1000, burst_count: 1000}}
rc_joins:
  local: {{per_second: 1000, burst_count: 1000}}
  remote: {{per_second: 1000, burst_count: 1000}}
rc_invites:
  per_room: {{per_second: 1000, burst_count: 1000}}
  per_user: {{per_second: 1000, burst_count: 1000}}
  per_issuer: {{per_second: 1000, burst_count: 1000}}
"""


_LOG_CONFIG = """
version: 1
formatters:
  precise: {format: '%(asctime)s - %(name)s - %(levelname)s - %(message)s'}
handlers:
  file: {class: logging.FileHandler, formatter: precise, filename: LOGFILE}
root: {level: WARNING, handlers: [file]}
disable_existing_loggers: false
"""


@dataclass
class Homeserver:
    """One Synapse on 127.0.0.1, its data in ``data``."""

    data: Path
    port: int = field(default_factory=_free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        python = str(synapse_python())
        config = self.data / "homeserver.yaml"
        config.write_text(_config(self.data, self.port))
        (self.data / "log.config").write_text(
            _LOG_CONFIG.replace("LOGFILE", str(self.data / "homeserver.log"))
        )
        subprocess.run(
            [python, "-m", "synapse.app.homeserver", "-c", str(config), "--generate-keys"],
            check=True,
            capture_output=True,
        )
        log = (self.data / "stdout.log").open("wb")
        self.process = subprocess.Popen(
            [python, "-m", "synapse.app.homeserver", "-c", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.data,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"Synapse exited: {(self.data / 'stdout.log').read_text()}")
            try:
                if httpx.get(f"{self.url}/_matrix/client/versions", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("Synapse did not answer within a minute")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def register(self, localpart: str, *, admin: bool = False, password: str = "secret") -> Person:
        """A new user (shared-secret registration) with an access token of its own."""
        endpoint = f"{self.url}/_synapse/admin/v1/register"
        nonce = httpx.get(endpoint).json()["nonce"]
        role = "admin" if admin else "notadmin"
        signed = "\x00".join((nonce, localpart, password, role)).encode()
        body = {
            "nonce": nonce,
            "username": localpart,
            "password": password,
            "admin": admin,
            "mac": hmac.new(SECRET.encode(), signed, hashlib.sha1).hexdigest(),
        }
        answer = httpx.post(endpoint, json=body, timeout=30)
        answer.raise_for_status()
        data = answer.json()
        return Person(self.url, data["user_id"], data["access_token"])

    def limit(self, admin: Person, user_id: str, per_second: float, burst: int) -> None:
        """``user_id``'s own message rate limit (the admin API's override)."""
        admin.request(
            "POST",
            f"/_synapse/admin/v1/users/{quote(user_id)}/override_ratelimit",
            {"messages_per_second": per_second, "burst_count": burst},
        )


@dataclass
class Person:
    """A Matrix user as a test drives one: the client-server API over plain HTTP."""

    url: str
    user_id: str
    token: str
    since: str | None = None

    def request(self, method: str, path: str, body: Json | None = None, **params: Any) -> Json:
        answer = httpx.request(
            method,
            self.url + path,
            json=body,
            params=params or None,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        if answer.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {answer.status_code} {answer.text}")
        return answer.json() if answer.content else {}

    def create_room(self, *, invite: list[str] = (), direct: bool = False, **extra: Any) -> str:
        body: Json = {"invite": list(invite), "is_direct": direct, **extra}
        if direct:
            body["preset"] = "trusted_private_chat"
        return str(self.request("POST", "/_matrix/client/v3/createRoom", body)["room_id"])

    def join(self, room_id: str) -> None:
        self.request("POST", f"/_matrix/client/v3/join/{quote(room_id)}", {})

    def invite(self, room_id: str, user_id: str) -> None:
        self.request(
            "POST", f"/_matrix/client/v3/rooms/{quote(room_id)}/invite", {"user_id": user_id}
        )

    def kick(self, room_id: str, user_id: str) -> None:
        self.request(
            "POST", f"/_matrix/client/v3/rooms/{quote(room_id)}/kick", {"user_id": user_id}
        )

    def send(self, room_id: str, content: Json, event_type: str = "m.room.message") -> str:
        path = f"/_matrix/client/v3/rooms/{quote(room_id)}/send/{event_type}/{uuid.uuid4().hex}"
        return str(self.request("PUT", path, content)["event_id"])

    def say(self, room_id: str, text: str, **extra: Any) -> str:
        return self.send(room_id, {"msgtype": "m.text", "body": text, **extra})

    def react(self, room_id: str, event_id: str, key: str) -> str:
        relates = {"rel_type": "m.annotation", "event_id": event_id, "key": key}
        return self.send(room_id, {"m.relates_to": relates}, "m.reaction")

    def reply(self, room_id: str, event_id: str, text: str) -> str:
        return self.say(
            room_id, text, **{"m.relates_to": {"m.in_reply_to": {"event_id": event_id}}}
        )

    def redact(self, room_id: str, event_id: str) -> None:
        path = (
            f"/_matrix/client/v3/rooms/{quote(room_id)}/redact/{quote(event_id)}/{uuid.uuid4().hex}"
        )
        self.request("PUT", path, {})

    def state(self, room_id: str, event_type: str, content: Json, state_key: str = "") -> None:
        path = f"/_matrix/client/v3/rooms/{quote(room_id)}/state/{event_type}/{quote(state_key)}"
        self.request("PUT", path, content)

    def messages(self, room_id: str, limit: int = 100) -> list[Json]:
        """The room's timeline, oldest first (``m.replace`` edits applied by the server
        when it bundles them: ``unsigned.m.relations``)."""
        answer = self.request(
            "GET", f"/_matrix/client/v3/rooms/{quote(room_id)}/messages", dir="b", limit=limit
        )
        return list(reversed(answer.get("chunk", [])))

    def upload(self, data: bytes, content_type: str, filename: str) -> str:
        """A file in the homeserver's media repository: its ``mxc://`` URI."""
        answer = httpx.post(
            f"{self.url}/_matrix/media/v3/upload",
            params={"filename": filename},
            content=data,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type},
            timeout=30,
        )
        answer.raise_for_status()
        return str(answer.json()["content_uri"])

    def download(self, server: str, media_id: str) -> bytes:
        """A file of the media repository (authenticated media)."""
        answer = httpx.get(
            f"{self.url}/_matrix/client/v1/media/download/{server}/{media_id}",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        answer.raise_for_status()
        return answer.content

    def logout(self) -> None:
        self.request("POST", "/_matrix/client/v3/logout", {})


if __name__ == "__main__":  # install Synapse for the tests (``.ci/run``)
    home = synapse_python().parent.parent
    if synapse_python().exists():
        sys.exit(0)
    subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
    subprocess.run(
        [str(home / "bin" / "pip"), "install", "--quiet", "matrix-synapse>=1.140,<2"], check=True
    )
