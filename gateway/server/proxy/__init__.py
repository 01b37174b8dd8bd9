"""The forward-proxy port's adapter: a raw asyncio protocol that parses request heads, asks
the forward-traffic use case (`gateway.tools.forward`) for every decision, and relays bytes.

`listener` (the listener and its connections), `exchange` (one request: absolute-form
forwarding and CONNECT set-up), `tunnel` and `tls_hello` (the CONNECT relay and its
ClientHello check), `splice` (the zero-copy tunnel relay), `request` (the strict request
reader), `responses` (the heads it writes), `auth` (Basic credentials), `ports` (the small
interfaces a request and a tunnel talk to) and `watch` (the per-connection idle watch).
"""
