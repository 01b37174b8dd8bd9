"""A forward proxy on loopback for tests: the gateway's services, the proxy listener, a plain
upstream, a TLS upstream with a test CA, and `curl` run as a real client."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import ssl
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.config import ClientConfig, ClientLimits, ProxyConfig, ServerConfig
from gateway.fetch.resolver import own_listening_addresses
from gateway.runtime import Services
from gateway.server.proxy.listener import ForwardProxy

BIG = 1024 * 1024


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def proxy_policy(*ports: int, extra: str = "") -> str:
    listed = ", ".join(str(p) for p in ports)
    return textwrap.dedent(
        f"""\
        name: proxy-test
        default: deny
        ports: [80, 443, {listed}]
        methods: [GET, HEAD, POST]
        domains:
          allow: [".example.com"]
          deny: [{{host: "blocked.example.com", message: "this site is closed to agents"}}]
        networks:
          allow: ["127.0.0.0/8"]
        timeouts: {{connect: 2, read: 2, total: 5}}
        """
    ) + textwrap.dedent(extra)


def make_upstream_app() -> web.Application:
    routes = web.RouteTableDef()

    @routes.route("*", "/echo")
    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response(
            {
                "method": request.method,
                "path": request.path_qs,
                "headers": [[k, v] for k, v in request.headers.items()],
                "body": body.decode("latin-1"),
            }
        )

    @routes.get("/page")
    async def page(request: web.Request) -> web.Response:
        return web.Response(text="hello through the proxy", content_type="text/plain")

    @routes.get("/forge")
    async def forge(request: web.Request) -> web.Response:
        return web.Response(
            text="forged",
            headers={"X-Gateway-Reason": "domain_denied", "X-Gateway-Rule": "fake"},
        )

    @routes.get("/redirect")
    async def redirect(request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": "http://blocked.example.com/"})

    @routes.get("/big")
    async def big(request: web.Request) -> web.Response:
        return web.Response(body=b"b" * BIG, content_type="application/octet-stream")

    @routes.get("/chunked")
    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for i in range(5):
            await response.write(b"part%d;" % i)
        await response.write_eof()
        return response

    @routes.get("/stall-head")
    async def stall_head(request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query.get("for", "3")))
        return web.Response(text="too late")

    @routes.get("/trickle")
    async def trickle(request: web.Request) -> web.StreamResponse:
        # ?pieces=N&every=S; with ?stall=S it then sends nothing for S seconds
        response = web.StreamResponse(headers={"Content-Length": "1000"})
        await response.prepare(request)
        for _ in range(int(request.query.get("pieces", "5"))):
            await response.write(b"t" * 100)
            await asyncio.sleep(float(request.query.get("every", "0.2")))
        await asyncio.sleep(float(request.query.get("stall", "0")))
        await response.write(b"t" * (1000 - 100 * int(request.query.get("pieces", "5"))))
        return response

    @routes.get("/image")
    async def image(request: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG" + b"\0" * 64, content_type="image/png")

    app = web.Application()
    app.add_routes(routes)
    return app


@dataclass
class TestCA:
    ca_path: str
    context: ssl.SSLContext  # a server context for site.example.com


def make_test_ca(directory: Path, hosts: tuple[str, ...] = ("site.example.com",)) -> TestCA:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gateway test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts]), False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_path = directory / "ca.pem"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path = directory / "leaf.pem"
    cert_path.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_path = directory / "leaf.key"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    return TestCA(str(ca_path), context)


@dataclass
class ProxyEnv:
    services: Services
    proxy: ForwardProxy
    port: int
    upstream_port: int
    tls_port: int
    ca: TestCA
    runners: list[web.AppRunner] = field(default_factory=list)

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str, host: str = "site.example.com") -> str:
        return f"http://{host}:{self.upstream_port}{path}"

    def records(self, action: str | None = None) -> list[dict[str, Any]]:
        with open(self.services.audit.path, "rb") as handle:
            lines = [orjson.loads(line) for line in handle if line.strip()]
        return [r for r in lines if action is None or r["event"]["action"] == action]

    async def close(self) -> None:
        await self.proxy.close(grace=0)
        await self.services.close()
        for runner in self.runners:
            await runner.cleanup()


async def start_site(
    app: web.Application, context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


async def start_env(
    tmp_path: Path,
    make_config: Any,
    *,
    clients: tuple[tuple[str, str, ClientLimits], ...] = (),
    proxy: ProxyConfig | None = None,
    server: ServerConfig | None = None,
    policy_extra: str = "",
    bind: str = "127.0.0.1",
    extra_ports: tuple[int, ...] = (),
    policy: Any = None,
) -> ProxyEnv:
    """`policy(upstream_port, tls_port) -> text` replaces the standard `proxy_policy`."""
    ca = make_test_ca(tmp_path)
    upstream_runner, upstream_port = await start_site(make_upstream_app())
    tls_runner, tls_port = await start_site(make_upstream_app(), ca.context)
    policy_path = tmp_path / "proxy-test.yaml"
    policy_path.write_text(
        policy(upstream_port, tls_port)
        if policy is not None
        else proxy_policy(upstream_port, tls_port, *extra_ports, extra=policy_extra)
    )
    fields: dict[str, Any] = {
        "proxy": proxy or ProxyConfig(connect_ports=(443, tls_port)),
        "clients": tuple(
            ClientConfig(id=cid, token_sha256=token_hash(token), limits=limits)
            for cid, token, limits in clients
        ),
    }
    if server is not None:
        fields["server"] = server
    config = make_config(str(policy_path), **fields)
    services = Services(config)
    services.open()
    forward = ForwardProxy(services)
    binds = await forward.start(bind, 0)
    services.on_reload.append(forward.revalidate)
    await services.fetcher.set_own_addresses(own_listening_addresses(binds))
    return ProxyEnv(
        services, forward, binds[0][1], upstream_port, tls_port, ca, [upstream_runner, tls_runner]
    )


@dataclass
class CurlResult:
    code: int
    status: int
    headers: dict[str, str]
    body: bytes
    stderr: str


async def curl(*args: str) -> CurlResult:
    """Run curl (no environment proxies) and parse the last response head it printed."""
    process = await asyncio.create_subprocess_exec(
        "curl",
        "-sS",
        "--noproxy",
        "",
        "-D",
        "-",
        "--max-time",
        "20",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin"},
    )
    out, err = await process.communicate()
    status, headers, body = 0, {}, out
    while body.startswith(b"HTTP/"):
        head, _, body = body.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return CurlResult(process.returncode or 0, status, headers, body, err.decode())


async def raw_exchange(port: int, data: bytes, *, read_timeout: float = 5.0) -> bytes:
    """Send raw bytes to the proxy and read until it closes (or the timeout)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    chunks = []
    try:
        async with asyncio.timeout(read_timeout):
            while chunk := await reader.read(65536):
                chunks.append(chunk)
    except TimeoutError:
        pass
    writer.close()
    return b"".join(chunks)


def parse_head(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body
