"""The forward-proxy port's adapter: a raw asyncio protocol that parses request heads with
the strict reader (`gateway.wire.request`), feeds each request to the use case's machine
(`gateway.tools.forward_flow`) and carries out its commands, and relays bytes.

`listener` (the listener and its connections), `exchange` (one request's commands carried
out: absolute-form forwarding and CONNECT set-up), `tunnel` and `tls_hello` (the CONNECT
relay and its ClientHello check), `splice` (the zero-copy tunnel relay), `responses` (the
heads it writes), `auth` (Basic credentials), `ports` (the small interfaces a request and a
tunnel talk to) and `watch` (the per-connection idle watch).
"""
