"""compose.yaml, deploy/ and the Dockerfile, read as an operator's tools would read them.

No network and no Docker daemon: the files are parsed; `docker compose config` and
`nginx -t` run only where those programs are installed (skipped otherwise).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.engine import make_url

from bot.checks.exposure import check_api_exposure
from bot.fleet.settings import check_fleet_database
from bot.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
ENV_EXAMPLE = ROOT / "deploy" / ".env.fleet.example"
DOCKERFILE = ROOT / "Dockerfile"
PYPROJECT = ROOT / "pyproject.toml"

# Read by compose or by asyncpg/uvicorn, not by chathub's settings.
NOT_CHATHUB_SETTINGS = {"POSTGRES_PASSWORD", "PGPASSWORD", "FORWARDED_ALLOW_IPS"}


# -- helpers ------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def chathub_services() -> dict[str, dict[str, Any]]:
    """The services built from this repository's Dockerfile: the chathub processes."""
    return {name: svc for name, svc in services().items() if "build" in svc}


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's ``environment:``, as a mapping whichever form it is written in."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def env_file(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def healthcheck_command(service: dict[str, Any]) -> list[str]:
    test = service["healthcheck"]["test"]
    assert test[0] == "CMD", "exec form: no shell in the way"
    return test[1:]


def nginx_upstream_servers(text: str) -> list[str]:
    """``host:port`` of each ``server`` in the ``upstream chathub`` block."""
    block = re.search(r"upstream\s+chathub\s*\{(.*?)\}", text, re.S)
    assert block, "deploy/nginx.conf has no `upstream chathub { ... }`"
    return re.findall(r"^\s*server\s+(\S+)", block.group(1), re.M)


def uncommented(text: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


# -- the compose file ---------------------------------------------------------------------


def test_the_fleet_is_reached_through_one_published_port_on_the_load_balancer() -> None:
    published = {name: svc["ports"] for name, svc in services().items() if svc.get("ports")}
    assert list(published) == ["nginx"], "only the load balancer is reachable from outside"
    assert len(published["nginx"]) == 1
    _host, container = str(published["nginx"][0]).rsplit(":", 1)
    listens = re.findall(r"^\s*listen\s+(\d+)", uncommented(NGINX_CONF.read_text()), re.M)
    assert listens == [container], "nginx listens on the port compose publishes"


def test_three_chathub_processes_are_fleet_members_with_their_own_ids() -> None:
    members = chathub_services()
    assert len(members) == 3
    ids = [environment(svc)["CHATHUB_PROCESS_ID"] for svc in members.values()]
    assert len(set(ids)) == 3, f"process ids must differ: {ids}"
    for name, svc in members.items():
        env = environment(svc)
        assert env["CHATHUB_FLEET"] == "true", name
        assert env["HTTP_HOST"] == "0.0.0.0", f"{name}: nginx must reach it"
        assert svc["build"] == ".", f"{name}: built from this repository's Dockerfile"
        assert svc["restart"] == "unless-stopped", name
        assert svc["env_file"] == "deploy/.env.fleet", name


def test_every_process_uses_the_postgres_service_and_starts_after_it_is_healthy() -> None:
    postgres = services()["postgres"]
    pg_env = environment(postgres)
    for name, svc in chathub_services().items():
        url = make_url(environment(svc)["DATABASE_URL"])
        assert url.drivername == "postgresql+asyncpg", name
        assert url.host == "postgres", f"{name}: the compose service's name"
        assert (url.username, url.database) == (pg_env["POSTGRES_USER"], pg_env["POSTGRES_DB"])
        # The password reaches asyncpg as PGPASSWORD, from the same variable postgres gets.
        assert url.password is None, f"{name}: no secret in compose.yaml"
        assert environment(svc)["PGPASSWORD"] == pg_env["POSTGRES_PASSWORD"]
        assert "${POSTGRES_PASSWORD" in pg_env["POSTGRES_PASSWORD"], "taken from --env-file"
        assert svc["depends_on"] == {"postgres": {"condition": "service_healthy"}}, name


def test_postgres_keeps_its_data_in_a_volume_and_reports_ready_with_pg_isready() -> None:
    postgres = services()["postgres"]
    assert re.fullmatch(r"postgres:1[56](\S*)", postgres["image"])
    assert "pg_isready" in healthcheck_command(postgres)
    volume, _, mount = postgres["volumes"][0].partition(":")
    assert mount == "/var/lib/postgresql/data"
    assert volume in compose()["volumes"], "a named volume, kept across `down` and `up`"


def test_the_processes_share_one_workspace_so_a_chat_keeps_its_files_on_take_over() -> None:
    workspaces = set()
    for svc in chathub_services().values():
        (mount,) = [v for v in svc["volumes"] if v.endswith(":/workspace")]
        workspaces.add(mount.split(":")[0])
        assert environment(svc)["CHATHUB_WORKSPACE"] == "/workspace"
    assert len(workspaces) == 1
    assert workspaces <= set(compose()["volumes"])


def test_each_process_is_health_checked_on_its_own_healthz() -> None:
    for name, svc in chathub_services().items():
        command = healthcheck_command(svc)
        port = environment(svc)["HTTP_PORT"]
        assert command[:2] == ["python", "-c"], f"{name}: the slim image has no curl"
        assert f"http://127.0.0.1:{port}/healthz" in command[2], name


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[HTTPServer]:
    server = HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
def test_the_healthcheck_fails_when_healthz_answers_503(
    health_server: HTTPServer, status: int, healthy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_Health, "status", status)
    svc = next(iter(chathub_services().values()))
    _python, flag, code = healthcheck_command(svc)
    port = environment(svc)["HTTP_PORT"]
    code = code.replace(f"127.0.0.1:{port}", f"127.0.0.1:{health_server.server_port}")
    done = subprocess.run([sys.executable, flag, code], capture_output=True, timeout=30)
    assert (done.returncode == 0) is healthy, done.stderr.decode()


def test_compose_yaml_holds_no_secret() -> None:
    text = COMPOSE.read_text()
    assert "change-me" not in text
    for key in ("CHATHUB_API_TOKEN", "TELEGRAM_BOT_TOKEN", "LLM_API_KEY"):
        assert key not in text, f"{key} belongs in deploy/.env.fleet"


# -- the load balancer --------------------------------------------------------------------


def test_nginx_round_robins_over_every_chathub_process() -> None:
    text = uncommented(NGINX_CONF.read_text())
    port = environment(next(iter(chathub_services().values())))["HTTP_PORT"]
    assert sorted(nginx_upstream_servers(text)) == [
        f"{name}:{port}" for name in sorted(chathub_services())
    ]
    # Round robin is nginx's default: no hash, ip_hash or least_conn picks one process.
    assert not re.search(r"^\s*(hash|ip_hash|least_conn|random)\b", text, re.M)
    assert re.findall(r"proxy_pass\s+http://chathub;", text), "every location uses the pool"


def test_nginx_fails_over_on_errors_timeouts_502_and_503_and_retries_the_webhook() -> None:
    text = uncommented(NGINX_CONF.read_text())
    rules = re.findall(r"proxy_next_upstream\s+([^;]+);", text)
    assert rules, "no passive failover"
    for rule in rules:
        assert {"error", "timeout", "http_502", "http_503"} <= set(rule.split())
    webhook = re.search(r"location\s*=\s*/telegram/webhook\s*\{(.*?)\}", text, re.S)
    assert webhook, "the webhook's own location"
    assert "non_idempotent" in webhook.group(1), "a POSTed update may go to a second process"


def _seconds(value: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(ms|s|m|h)?", value).groups()
    return int(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[unit]


def _directive(block: str, name: str) -> str | None:
    found = re.findall(rf"^\s*{name}\s+([^;]+);", block, re.M)
    return found[-1] if found else None


def test_a_frozen_process_times_out_in_time_for_the_request_to_go_elsewhere() -> None:
    # A SIGSTOPped process accepts and never answers: only the read timeout ends the wait,
    # and nginx retries only while proxy_next_upstream_timeout has not run out.
    text = uncommented(NGINX_CONF.read_text())
    server_level = re.sub(r"location[^{]*\{.*?\}", "", text, flags=re.S)
    limit = _seconds(_directive(server_level, "proxy_next_upstream_timeout") or "0")
    read = _seconds(_directive(server_level, "proxy_read_timeout") or "60s")
    webhook = re.search(r"location\s*=\s*/telegram/webhook\s*\{(.*?)\}", text, re.S).group(1)
    webhook_read = _seconds(_directive(webhook, "proxy_read_timeout") or str(read))
    if limit:  # 0: no limit
        assert read < limit, "a request to a frozen process would end as a 504"
        assert webhook_read < limit
    assert webhook_read <= 10, "Telegram waits for the webhook's answer; it must move on soon"


def _megabytes(value: str) -> float:
    number, unit = re.fullmatch(r"(\d+)([kKmMgG])?", value).groups()
    return (
        int(number)
        * {"k": 1 / 1024, "m": 1, "g": 1024, None: 1 / 2**20}[(unit or "").lower() or None]
    )


def test_nginx_takes_every_body_the_service_takes() -> None:
    """A web chat upload or voice note over 2 MB got nginx's own 413 page, though the
    page offered 20 MB (found by review); so would /v1's images."""
    from bot.completions.asked import MAX_BODY_BYTES
    from bot.webchat.uploads import MAX_UPLOAD_BYTES

    text = uncommented(NGINX_CONF.read_text())
    uploads = re.search(r"location\s*~\s*\^/chat/conversations/[^{]*\{(.*?)\}", text, re.S)
    v1 = re.search(r"location\s+/v1/\s*\{(.*?)\}", text, re.S)
    assert uploads is not None and v1 is not None
    assert _megabytes(_directive(uploads.group(1), "client_max_body_size") or "0") * 2**20 > (
        MAX_UPLOAD_BYTES
    )
    assert _megabytes(_directive(v1.group(1), "client_max_body_size") or "0") * 2**20 > (
        MAX_BODY_BYTES
    )


def test_nginx_gets_its_config_from_deploy() -> None:
    nginx = services()["nginx"]
    assert "./deploy/nginx.conf:/etc/nginx/conf.d/default.conf:ro" in nginx["volumes"]
    assert sorted(nginx["depends_on"]) == sorted(chathub_services())


def _nginx_version(nginx: str) -> tuple[int, ...]:
    done = subprocess.run([nginx, "-v"], capture_output=True, text=True, timeout=30)
    found = re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", done.stderr)
    return tuple(int(part) for part in found.groups()) if found else (0,)


def test_nginx_accepts_the_config(tmp_path: Path) -> None:
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    if nginx is None:
        pytest.skip("nginx is not installed (apt-get install nginx-light to check the config)")
    conf = NGINX_CONF.read_text()
    # The compose names resolve only on compose's network; Docker's DNS is not here.
    for name in chathub_services():
        conf = conf.replace(f"{name}:", "127.0.0.1:")
    conf = conf.replace("resolver 127.0.0.11", "resolver 127.0.0.1")
    if _nginx_version(nginx) < (1, 27, 3):  # `resolve` in upstreams came with 1.27.3
        conf = re.sub(r"\s+resolve(?=[\s;])", "", conf)
    (tmp_path / "fleet.conf").write_text(conf)
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{}}\n"
        f"http {{\n  access_log off;\n  include {tmp_path}/fleet.conf;\n}}\n"
    )
    done = subprocess.run(
        [nginx, "-t", "-q", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr


# -- the env file -------------------------------------------------------------------------


def test_the_example_env_file_names_only_real_variables() -> None:
    known = {name.upper() for name in Settings.model_fields} | NOT_CHATHUB_SETTINGS
    unknown = set(env_file(ENV_EXAMPLE)) - known
    assert not unknown, f"typos or variables chathub does not read: {sorted(unknown)}"


def test_the_example_env_file_defines_what_compose_interpolates() -> None:
    wanted = set(re.findall(r"\$\{(\w+)", COMPOSE.read_text()))
    assert wanted, "compose.yaml interpolates POSTGRES_PASSWORD"
    assert wanted <= set(env_file(ENV_EXAMPLE))


def test_the_example_env_file_leaves_the_fleet_wiring_to_compose() -> None:
    # environment: wins over env_file, so a value there would be silently ignored.
    owned = set().union(*(environment(svc) for svc in chathub_services().values()))
    assert not owned & set(env_file(ENV_EXAMPLE))


@pytest.mark.parametrize("name", ["chathub-1", "chathub-2", "chathub-3"])
def test_a_process_started_by_compose_accepts_its_configuration(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment compose gives a process (the example file under `environment:`)
    passes the checks `chathub serve` runs first."""
    compose_env = environment(chathub_services()[name])
    given = {**env_file(ENV_EXAMPLE), **compose_env}
    given["PGPASSWORD"] = env_file(ENV_EXAMPLE)["POSTGRES_PASSWORD"]  # compose interpolates
    monkeypatch.chdir(tmp_path)  # no .env from the working tree
    for key in {field.upper() for field in Settings.model_fields}:
        monkeypatch.delenv(key, raising=False)
    for key, value in given.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert settings.chathub_fleet is True
    assert settings.chathub_process_id == name
    assert settings.http_host == "0.0.0.0"
    check_fleet_database(settings.database_url)
    check_api_exposure(settings.http_host, settings.chathub_api_token)


# -- the Dockerfile -----------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            rows.append((word.upper(), rest.strip()))
    return rows


def test_the_image_holds_every_package_pyproject_installs() -> None:
    include = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["packages"]["find"][
        "include"
    ]
    packages = {pattern.rstrip("*").rstrip(".") for pattern in include}
    for package in packages:
        assert (ROOT / package / "__init__.py").is_file(), f"{package}: no such package"
    copied = set()
    for word, rest in dockerfile_instructions():
        if word == "COPY":
            *sources, _dest = rest.split()
            copied |= {source.rstrip("/") for source in sources if not source.startswith("--")}
    missing = packages - copied
    assert not missing, f"pip install . in the image would install without {sorted(missing)}"


def test_the_image_runs_as_a_user_that_is_not_root() -> None:
    rows = dockerfile_instructions()
    users = [rest for word, rest in rows if word == "USER"]
    assert users, "no USER: the process would run as root"
    assert users[-1].split(":")[0] not in {"root", "0"}
    last_user = max(i for i, (word, _) in enumerate(rows) if word == "USER")
    runs_after = [rest for word, rest in rows[last_user:] if word == "RUN"]
    assert not runs_after or all("useradd" not in r for r in runs_after)
    assert [word for word, _ in rows].index("ENTRYPOINT") > last_user


# -- docker compose itself ----------------------------------------------------------------


def _compose_command() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        done = subprocess.run(
            [docker, "compose", "version"], capture_output=True, text=True, timeout=30
        )
        if done.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def test_docker_compose_accepts_the_file_with_the_example_env(tmp_path: Path) -> None:
    command = _compose_command()
    if command is None:
        pytest.skip("neither `docker compose` (the plugin) nor docker-compose is installed")
    # A copy, with the example as deploy/.env.fleet: the real one is the operator's.
    shutil.copy(COMPOSE, tmp_path / "compose.yaml")
    shutil.copy(DOCKERFILE, tmp_path / "Dockerfile")
    shutil.copytree(ROOT / "deploy", tmp_path / "deploy")
    shutil.copy(ENV_EXAMPLE, tmp_path / "deploy" / ".env.fleet")
    done = subprocess.run(
        [*command, "-f", "compose.yaml", "--env-file", "deploy/.env.fleet", "config", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_docker_compose_refuses_to_start_without_the_database_password(tmp_path: Path) -> None:
    command = _compose_command()
    if command is None:
        pytest.skip("neither `docker compose` (the plugin) nor docker-compose is installed")
    shutil.copy(COMPOSE, tmp_path / "compose.yaml")
    shutil.copytree(ROOT / "deploy", tmp_path / "deploy")
    shutil.copy(ENV_EXAMPLE, tmp_path / "deploy" / ".env.fleet")
    (tmp_path / "empty.env").write_text("")
    done = subprocess.run(
        [*command, "-f", "compose.yaml", "--env-file", "empty.env", "config", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode != 0
    assert "POSTGRES_PASSWORD" in done.stderr
