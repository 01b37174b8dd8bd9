"""Host sightings for dlp.untrusted_hosts: per-client LRU bounds, and the hosts of links."""

from __future__ import annotations

from gateway.tools.sightings import InMemoryHostSightings, host_of, hosts_in_text


async def test_only_from_content_until_the_client_asks_itself() -> None:
    store = InMemoryHostSightings()
    assert not await store.only_from_content("a", "collector.example")  # never met
    await store.seen_in_content("a", ["collector.example", "docs.example"])
    assert await store.only_from_content("a", "collector.example")
    assert not await store.only_from_content("b", "collector.example")  # per client
    await store.requested("a", "collector.example")
    assert not await store.only_from_content("a", "collector.example")
    # A host the client asked for first stays its own when a page links to it later.
    await store.requested("a", "own.example")
    await store.seen_in_content("a", ["own.example"])
    assert not await store.only_from_content("a", "own.example")


async def test_memory_is_bounded_per_client_and_in_clients() -> None:
    store = InMemoryHostSightings(max_hosts=3, max_clients=2)
    await store.seen_in_content("a", [f"h{i}.example" for i in range(10)])
    assert store.size() == 3
    assert await store.only_from_content("a", "h9.example")
    assert not await store.only_from_content("a", "h0.example")  # evicted, oldest first
    await store.seen_in_content("b", ["x.example"])
    await store.seen_in_content("c", ["y.example"])
    assert not await store.only_from_content("a", "h9.example")  # client a evicted
    assert store.size() == 2


def test_hosts_in_text() -> None:
    text = (
        "See [the docs](https://Docs.Example.com/a/b) and http://127.0.0.1:8080/x, "
        "<https://xn--bcher-kva.example/> or https://bücher.example/?q=1; not ftp://x.example "
        "nor https:// alone."
    )
    assert hosts_in_text(text) == {
        "docs.example.com",
        "127.0.0.1",
        "xn--bcher-kva.example",
    }
    assert len(hosts_in_text(" ".join(f"https://h{i}.example/" for i in range(50)), limit=7)) == 7
    assert host_of("not a url") is None
