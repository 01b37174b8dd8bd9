"""The reviewers' read-only view of the audit folder: which files hold which chain, the newest
records first (read backwards, filtered, paged), one record in full, per-client summaries, a
chart of decisions over time and each chain's verification. Reads files only: never writes,
never imports aiohttp; the server's review routes turn these values into pages.
"""
