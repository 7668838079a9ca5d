"""The scrape itself against a real loopback server: one kept-alive connection, a whole-request
deadline, a size cap with or without Content-Length, no redirects followed, chunked bodies, and a
kept-alive connection the server dropped while idle."""

from __future__ import annotations

import pytest

from collectors.prometheus import FetchError, HttpFetcher
from tests.unit.collectors.factories import Reply, metrics_server, vllm_metrics
from tests.waiting import HANG_S


def test_scrapes_reuse_one_connection() -> None:
    with metrics_server(lambda n: Reply(body=vllm_metrics().encode())) as server:
        fetcher = HttpFetcher(server.url, timeout_s=HANG_S, max_bytes=1 << 20)
        bodies = [fetcher.fetch() for _ in range(5)]
        fetcher.close()
    assert bodies == [vllm_metrics().encode()] * 5
    assert len({s.client_port for s in server.served}) == 1


def test_a_body_trickling_in_is_cut_at_the_deadline_not_at_each_read() -> None:
    # GIVEN a server that sends 100 bytes every 50 ms: no single read times out, the whole takes
    # over a second (a loaded machine only makes it longer)
    body = vllm_metrics().encode()
    with metrics_server(lambda n: Reply(body=body, trickle_s=0.05)) as server:
        fetcher = HttpFetcher(server.url, timeout_s=0.3, max_bytes=1 << 20)
        with pytest.raises(FetchError, match=r"^no complete response within 0\.3 s$"):
            fetcher.fetch()


@pytest.mark.parametrize("content_length", [True, False], ids=["announced", "streamed"])
def test_a_response_over_the_cap_is_refused(content_length: bool) -> None:
    reply = Reply(body=b"x" * 5000, content_length=content_length)
    with metrics_server(lambda n: reply) as server:
        fetcher = HttpFetcher(server.url, timeout_s=HANG_S, max_bytes=1000)
        with pytest.raises(FetchError, match="over the 1000 byte cap"):
            fetcher.fetch()


def test_a_redirect_is_not_followed() -> None:
    with metrics_server(lambda n: Reply(status=301, body=b"")) as server:
        fetcher = HttpFetcher(server.url, timeout_s=HANG_S, max_bytes=1000)
        with pytest.raises(FetchError, match=r"^HTTP 301 Moved Permanently$"):
            fetcher.fetch()
    assert len(server.served) == 1


def test_a_chunked_body_is_read_whole_and_the_connection_kept() -> None:
    body = vllm_metrics().encode()
    with metrics_server(lambda n: Reply(body=body, chunked=True)) as server:
        fetcher = HttpFetcher(server.url, timeout_s=HANG_S, max_bytes=1 << 20)
        bodies = [fetcher.fetch() for _ in range(3)]
        fetcher.close()
    assert len(body) > 1000  # several chunks
    assert bodies == [body] * 3
    assert len({s.client_port for s in server.served}) == 1


def test_a_chunked_body_over_the_cap_is_refused() -> None:
    with metrics_server(lambda n: Reply(body=b"x" * 5000, chunked=True)) as server:
        fetcher = HttpFetcher(server.url, timeout_s=HANG_S, max_bytes=1000)
        with pytest.raises(FetchError, match="over the 1000 byte cap"):
            fetcher.fetch()


def test_a_connection_the_server_dropped_is_opened_again_not_a_failed_scrape() -> None:
    # GIVEN a server that closes each kept-alive connection after answering, without saying so
    body = vllm_metrics().encode()
    with metrics_server(lambda n: Reply(body=body, drop_after=True)) as server:
        fetcher = HttpFetcher(server.url, timeout_s=HANG_S, max_bytes=1 << 20)
        # WHEN it is scraped three times
        bodies = [fetcher.fetch() for _ in range(3)]
        fetcher.close()
    # THEN every scrape has the body, each on a new connection
    assert bodies == [body] * 3
    assert len({s.client_port for s in server.served}) == 3
