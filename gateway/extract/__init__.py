"""Response bodies -> readable text: HTML main content as Markdown or text, JSON pretty-printed.

Pure (lxml and the standard library): no network, no asyncio, no shared mutable state (only
bounded caches of pure functions), so callers may run `extract` in a thread pool or in worker
processes. Never imports trafilatura or any other extractor.
"""

from gateway.extract.charset import decode_text
from gateway.extract.document import Document, ExtractError, extract

__all__ = ["Document", "ExtractError", "decode_text", "extract"]
