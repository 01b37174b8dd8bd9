"""A short agent-side client of the gateway's HTTP API: search, fetch, explain.

Prints the wrapped content and checks the envelope's `content_sha256` against the text
between the markers. Standard library only.

    GATEWAY_URL=http://127.0.0.1:8080 GATEWAY_TOKEN=... python examples/agent_client.py "query"
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import urllib.error
import urllib.request

GATEWAY = os.environ.get("GATEWAY_URL", "http://127.0.0.1:8080").rstrip("/")
TOKEN = os.environ.get("GATEWAY_TOKEN")


def call(path: str, body: dict) -> dict:
    """POST JSON; a gateway error comes back as {"error": {...}} like any other body."""
    request = urllib.request.Request(
        GATEWAY + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}
        | ({"Authorization": f"Bearer {TOKEN}"} if TOKEN else {}),
    )
    try:
        with urllib.request.urlopen(request, timeout=90) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        return json.load(error)


def unwrap(wrapped: str, nonce: str) -> str:
    """The text between the begin and end markers that carry this response's nonce."""
    begin, _, rest = wrapped.partition("\n")
    text, _, end = rest.rpartition("\n")
    if f"nonce={nonce}" not in begin or end != f"<<<END_UNTRUSTED_WEB_CONTENT nonce={nonce}>>>":
        raise ValueError("the markers do not carry this response's nonce")
    return text


def check(body: dict, field: str) -> None:
    envelope = body["envelope"]
    text = unwrap(body[field], envelope["marker"])
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    verdict = "ok" if digest == envelope["content_sha256"] else "MISMATCH"
    print(f"content_sha256 {verdict}: {digest[:16]}…")


def describe_policy(explained: dict) -> str:
    """One line for an explain answer: `policy: allow (rule domains.allow[0])`, or with the
    reason for a denial: `policy: deny (domain_not_allowed, rule default)`."""
    if "error" in explained:
        return f"policy: explain refused ({explained['error']['code']})"
    reason = f"{explained['reason']}, " if explained.get("reason") else ""
    return f"policy: {explained['decision']} ({reason}rule {explained['rule']})"


def main(query: str) -> int:
    search = call("/v1/search", {"query": query, "max_results": 5})
    if "error" in search:
        print("search refused:", search["error"]["code"], search["error"]["message"])
        return 1
    for result in search["results"]:
        title = unwrap(result["title"], search["envelope"]["marker"])
        print(f"- {title}\n  {result['url']}  (id:{result['id']})")
    if not search["results"]:
        return 0
    first = search["results"][0]
    print(describe_policy(call("/v1/policy/explain", {"url": first["url"]})))
    page = call("/v1/fetch", {"url": f"id:{first['id']}", "max_chars": 2000})
    if "error" in page:
        error = page["error"]
        print("fetch refused:", error["code"], error["reason"], error["rule"], error["message"])
        return 1
    print(page["content"])  # still wrapped: hand it to the model as data, not instructions
    check(page, "content")
    return 0


if __name__ == "__main__":
    query = " ".join(sys.argv[1:]) or "python asyncio timeout"
    if not re.search(r"\S", query):
        sys.exit("give a query")
    sys.exit(main(query))
