"""Real agents and tools against a real `gateway serve`, as docs/agents.md connects them.

Over MCP: the official MCP SDK client and the OpenAI Agents SDK's MCP client (no model is
called) list and call the tools. Through the forward proxy, with only the environment
variables the docs give (http_proxy/HTTP_PROXY, https_proxy/HTTPS_PROXY): `pip download` from
a local package index, `git clone` from a local git server (git's "dumb" HTTP over static
files) and `curl`. An allowed host works; a denied one is refused with the gateway's reason.
Everything listens on loopback: the policy allows 127.0.0.0/8 explicitly (loopback is
private) and names the hosts, which resolve through `resolver.hosts`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx2
import orjson
import pytest
from aiohttp import web
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.processes import GatewayProcess, free_port

TOKEN = "gwt_agents-test-token-0123456789abcdef"
ALLOWED_INDEX = "index.allowed.test"
DENIED_INDEX = "index.denied.test"
GIT_HOST = "git.allowed.test"
HELLO = "hello through the gateway"
PACKAGE, VERSION = "tinypkg", "0.1"

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or shutil.which("curl") is None,
    reason="git and curl are installed by .ci/run",
)


def build_wheel() -> tuple[str, bytes]:
    """A minimal, valid pure-Python wheel."""
    name = f"{PACKAGE}-{VERSION}-py3-none-any.whl"
    info = f"{PACKAGE}-{VERSION}.dist-info"
    files = {
        f"{PACKAGE}/__init__.py": b"VALUE = 1\n",
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n"
        ).encode(),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return name, buffer.getvalue()


def build_bare_repo(root: Path) -> Path:
    """A bare repository with one commit, prepared for git's dumb HTTP protocol."""
    work, bare = root / "work", root / "repo.git"
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }

    def git(*args: str, cwd: Path) -> None:
        subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)

    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    (work / "README").write_text("cloned through the gateway\n")
    git("add", "README", cwd=work)
    git("commit", "-q", "-m", "first", cwd=work)
    git("clone", "-q", "--bare", str(work), str(bare), cwd=root)
    git("update-server-info", cwd=bare)
    return bare


def site(wheel_name: str, wheel: bytes, bare: Path) -> web.Application:
    digest = hashlib.sha256(wheel).hexdigest()
    app = web.Application()

    async def index(request: web.Request) -> web.Response:
        return web.Response(
            text=f'<a href="/simple/{PACKAGE}/">{PACKAGE}</a>', content_type="text/html"
        )

    async def project(request: web.Request) -> web.Response:
        link = f'<a href="/files/{wheel_name}#sha256={digest}">{wheel_name}</a>'
        return web.Response(text=f"<html><body>{link}</body></html>", content_type="text/html")

    async def file(request: web.Request) -> web.Response:
        return web.Response(body=wheel, content_type="application/octet-stream")

    async def hello(request: web.Request) -> web.Response:
        return web.Response(
            text=f"<html><body><p>{HELLO}</p></body></html>", content_type="text/html"
        )

    app.router.add_get("/simple/", index)
    app.router.add_get(f"/simple/{PACKAGE}/", project)
    app.router.add_get(f"/files/{wheel_name}", file)
    app.router.add_get("/hello", hello)
    app.router.add_static("/repo.git", bare)
    return app


@pytest.fixture
async def upstream(aiohttp_server, tmp_path):
    wheel_name, wheel = build_wheel()
    bare = build_bare_repo(tmp_path)
    return await aiohttp_server(site(wheel_name, wheel, bare), host="127.0.0.1")


@pytest.fixture
async def gateway(tmp_path, upstream):
    policy = tmp_path / "agents.yaml"
    policy.write_text(
        f"""\
name: agents-test
default: deny
schemes: [http, https]
ports: [{upstream.port}]
methods: [GET, HEAD]
domains:
  allow: [{ALLOWED_INDEX}, {GIT_HOST}, localhost]
networks:
  allow: ["127.0.0.0/8", "::1/128"]   # loopback is private: allowed here on purpose
limits:
  content_types: ["text/*", "application/*"]
"""
    )
    config = {
        "instance_id": "agents-test",
        "policy": str(policy),
        "listen": {"proxy_port": free_port()},
        "audit": {"path": str(tmp_path / "audit" / "gateway-{instance}.jsonl")},
        "clients": [
            {
                "id": "agent",
                "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest(),
                "policy": str(policy),
            }
        ],
        "resolver": {
            "system_hosts": True,  # localhost from /etc/hosts, like any other name
            "hosts": {name: ["127.0.0.1"] for name in (ALLOWED_INDEX, DENIED_INDEX, GIT_HOST)},
        },
    }
    process = GatewayProcess(tmp_path, config)
    await process.start()
    process.proxy_port = config["listen"]["proxy_port"]  # type: ignore[attr-defined]
    try:
        yield process
    finally:
        process.signal(15)
        assert await process.wait(30) == 0
    assert not list((tmp_path / "audit").glob("*.lock"))


def audit(tmp_path: Path) -> list[dict]:
    path = tmp_path / "audit" / "gateway-agents-test.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def proxy_env(gateway: GatewayProcess, tmp_path: Path) -> dict[str, str]:
    """What docs/agents.md tells a process: both spellings, since curl and git (libcurl)
    read only the lower-case http_proxy, and pip reads either."""
    proxy = f"http://agent:{TOKEN}@127.0.0.1:{gateway.proxy_port}"  # type: ignore[attr-defined]
    env = {
        k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("PIP_")
    }
    env.update(
        http_proxy=proxy,
        HTTP_PROXY=proxy,
        https_proxy=proxy,
        HTTPS_PROXY=proxy,
        NO_PROXY="",
        no_proxy="",
        HOME=str(tmp_path),
        PIP_CONFIG_FILE=os.devnull,
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
    )
    return env


async def run(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    import asyncio

    process = await asyncio.create_subprocess_exec(
        *args,
        env=env,
        cwd=str(cwd),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return subprocess.CompletedProcess(args, process.returncode or 0, out.decode(), err.decode())


# --- MCP -------------------------------------------------------------------------------------


async def test_the_official_mcp_sdk_lists_and_calls_the_tools(gateway, upstream, tmp_path) -> None:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"})
    async with (
        http,
        Client(streamable_http_client(f"{gateway.url}/mcp", http_client=http)) as client,
    ):
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"WebFetch", "WebSearch"} <= names
        page = await client.call_tool(
            "WebFetch", {"url": f"http://{ALLOWED_INDEX}:{upstream.port}/hello"}
        )
        assert not page.is_error and HELLO in page.content[0].text
        # localhost resolves from /etc/hosts like any name; the policy allows its addresses.
        local = await client.call_tool(
            "WebFetch", {"url": f"http://localhost:{upstream.port}/hello"}
        )
        assert not local.is_error, local.content[0].text
        denied = await client.call_tool(
            "WebFetch", {"url": f"http://{DENIED_INDEX}:{upstream.port}/hello"}
        )
    assert denied.is_error
    error = denied.structured_content["error"]
    assert (error["reason"], error["rule"]) == ("domain_not_allowed", "default")
    assert "to allow it, add the host" in error["message"] and "domains.allow" in error["message"]


async def test_the_openai_agents_sdk_mcp_client_lists_and_calls_the_tools(
    gateway, upstream
) -> None:
    from agents.mcp import MCPServerStreamableHttp

    params = {"url": f"{gateway.url}/mcp", "headers": {"Authorization": f"Bearer {TOKEN}"}}
    async with MCPServerStreamableHttp(params=params, name="egress-gateway") as server:
        names = {tool.name for tool in await server.list_tools()}
        assert {"WebFetch", "WebSearch"} <= names
        page = await server.call_tool(
            "WebFetch", {"url": f"http://{ALLOWED_INDEX}:{upstream.port}/hello"}
        )
        denied = await server.call_tool("WebFetch", {"url": f"http://10.0.0.7:{upstream.port}/"})
    assert not page.is_error and HELLO in page.content[0].text
    assert denied.is_error
    assert denied.structured_content["error"]["reason"] == "ip_literal_not_allowed"


async def test_without_the_token_mcp_is_refused(gateway) -> None:
    async with httpx2.AsyncClient() as http:
        response = await http.post(
            f"{gateway.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        )
    assert response.status_code == 401


# --- the forward proxy ---------------------------------------------------------------------


async def test_pip_downloads_from_an_allowed_index_and_not_from_a_denied_one(
    gateway, upstream, tmp_path
) -> None:
    env = proxy_env(gateway, tmp_path)
    common = [
        sys.executable,
        "-m",
        "pip",
        "download",
        f"{PACKAGE}=={VERSION}",
        "--no-deps",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--retries",
        "0",
        "--timeout",
        "10",
    ]
    allowed = await run(
        *common,
        "--index-url",
        f"http://{ALLOWED_INDEX}:{upstream.port}/simple/",
        "--trusted-host",
        ALLOWED_INDEX,
        "--dest",
        str(tmp_path / "ok"),
        env=env,
        cwd=tmp_path,
    )
    assert allowed.returncode == 0, allowed.stderr
    assert [p.name for p in (tmp_path / "ok").iterdir()] == [
        f"{PACKAGE}-{VERSION}-py3-none-any.whl"
    ]
    denied = await run(
        *common,
        "--index-url",
        f"http://{DENIED_INDEX}:{upstream.port}/simple/",
        "--trusted-host",
        DENIED_INDEX,
        "--dest",
        str(tmp_path / "no"),
        "-vvv",  # pip says why it could not read an index page only at debug level
        env=env,
        cwd=tmp_path,
    )
    assert denied.returncode != 0
    assert "403 Client Error: Forbidden" in denied.stdout + denied.stderr
    records = [r for r in audit(tmp_path) if r["event"]["action"] == "proxy_http"]
    assert {r["destination"]["domain"] for r in records if r["policy"]["decision"] == "allow"} == {
        ALLOWED_INDEX
    }
    refused = [r for r in records if r["policy"]["decision"] == "deny"]
    assert refused and {r["policy"]["reason"] for r in refused} == {"domain_not_allowed"}
    assert all(r["client"]["id"] == "agent" for r in records)


async def test_git_clones_through_the_proxy(gateway, upstream, tmp_path) -> None:
    env = proxy_env(gateway, tmp_path)
    url = f"http://{GIT_HOST}:{upstream.port}/repo.git"
    cloned = await run("git", "clone", "-q", url, str(tmp_path / "clone"), env=env, cwd=tmp_path)
    assert cloned.returncode == 0, cloned.stderr
    assert (tmp_path / "clone" / "README").read_text() == "cloned through the gateway\n"
    denied_url = f"http://{DENIED_INDEX}:{upstream.port}/repo.git"
    refused = await run(
        "git", "clone", "-q", denied_url, str(tmp_path / "no"), env=env, cwd=tmp_path
    )
    assert refused.returncode != 0 and "403" in refused.stderr
    git_records = [
        r
        for r in audit(tmp_path)
        if r["event"]["action"] == "proxy_http" and r["destination"]["domain"] == GIT_HOST
    ]
    assert git_records and all(r["policy"]["decision"] == "allow" for r in git_records)


async def test_curl_gets_the_page_or_the_gateways_reason(gateway, upstream, tmp_path) -> None:
    env = proxy_env(gateway, tmp_path)
    ok = await run(
        "curl", "-sS", f"http://{ALLOWED_INDEX}:{upstream.port}/hello", env=env, cwd=tmp_path
    )
    assert ok.returncode == 0 and HELLO in ok.stdout
    refused = await run(
        "curl",
        "-sS",
        "-D",
        "-",
        f"http://{DENIED_INDEX}:{upstream.port}/hello",
        env=env,
        cwd=tmp_path,
    )
    head = refused.stdout.lower()
    assert refused.stdout.startswith("HTTP/1.1 403")
    assert "x-gateway-reason: domain_not_allowed" in head and "x-gateway-rule: default" in head
    assert "to allow it, add the host" in refused.stdout
    # Without credentials the proxy asks for them.
    bare = {k: v for k, v in env.items() if "proxy" not in k.lower()}
    bare["http_proxy"] = f"http://127.0.0.1:{gateway.proxy_port}"
    unauth = await run(
        "curl",
        "-sS",
        "-o",
        os.devnull,
        "-w",
        "%{http_code}",
        f"http://{ALLOWED_INDEX}:{upstream.port}/hello",
        env=bare,
        cwd=tmp_path,
    )
    assert unauth.stdout == "407"


async def test_the_example_client_describes_explain_answers(gateway, upstream) -> None:
    import asyncio
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "examples" / "agent_client.py"
    spec = importlib.util.spec_from_file_location("agent_client_example", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.GATEWAY, example.TOKEN = gateway.url, TOKEN
    loop = asyncio.get_running_loop()

    def explain(url: str) -> str:
        return example.describe_policy(example.call("/v1/policy/explain", {"url": url}))

    allowed = await loop.run_in_executor(None, explain, f"http://{ALLOWED_INDEX}:{upstream.port}/")
    denied = await loop.run_in_executor(None, explain, f"http://{DENIED_INDEX}:{upstream.port}/")
    assert allowed == "policy: allow (rule domains.allow[0])"
    assert denied == "policy: deny (domain_not_allowed, rule default)"
