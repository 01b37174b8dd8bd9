"""Provenance: untrusted-content markers and sanitising (contract 5.5), the signed envelope's
helpers, and DSSE signing with Ed25519 keys (5.1, 5.4). Pure: no asyncio, aiohttp or network.
"""
