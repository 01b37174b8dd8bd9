"""HTTP/1's wire format as the gateway holds it: the limits and the strict readers both sides
of the house share. `http1` reads upstream responses (the WebFetch path and the proxy's
upstream client, in `fetch`) and holds the rules the proxy's request reader (in
`server/proxy`) shares with them. Pure: no sockets, no asyncio, no policy; it knows only
`gateway.errors`.
"""
