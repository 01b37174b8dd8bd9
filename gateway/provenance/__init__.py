"""Provenance: untrusted-content markers and sanitising, the signed envelope's
helpers, and DSSE signing with Ed25519 keys (5.1, 5.4). Pure: no asyncio, aiohttp or network.
"""
