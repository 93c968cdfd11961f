"""envoyproxy/ratelimit's HTTP surface on the real binary: `sluice --ratelimit-config` (the compat
fixture, tests/e2e/ratelimit_config/, unchanged) with `--ratelimit-http-listen` on a listener of
its own, a real redis-server, and a real Envoy whose native ratelimit filter asks it over gRPC
(envoy/ratelimit_compat.yaml). `POST /json` and Envoy's traffic count on one counter (README
example 2: 5 marketing messages a day per number), `/json` answers as the peer's protojson writes
it, and `/healthcheck` and `/rlconfig` answer as the peer's."""

import re
import uuid

import pytest
import requests

import stack

FIXTURE = stack.ROOT / "tests" / "e2e" / "ratelimit_config"
LISTENER = "RLS_OPEN_PORT"


@pytest.fixture(scope="module")
def surface(tmp_path_factory, upstream):
    """(envoy, backend, the surface's URL)."""
    tmp = tmp_path_factory.mktemp("ratelimit_http")
    port = stack.free_port()
    with stack.rls_stack(tmp, "ratelimit_compat.yaml", upstream, [LISTENER],
                         ["--ratelimit-config", str(FIXTURE),
                          "--ratelimit-http-listen", f"127.0.0.1:{port}"]) as (envoy, backend):
        yield envoy, backend, f"http://127.0.0.1:{port}"


def marketing(number, hits=None):
    """README example 2's two descriptors for `number`, as Envoy's route sends them; with `hits`,
    each descriptor's own hitsAddend."""
    pair = [{"entries": [{"key": "message_type", "value": "marketing"},
                         {"key": "to_number", "value": number}]},
            {"entries": [{"key": "to_number", "value": number}]}]
    if hits is not None:
        for d in pair:
            d["hitsAddend"] = hits
    return {"domain": "messaging", "descriptors": pair}


def envoy_get(envoy, number):
    return requests.get(envoy.url(LISTENER) + "/marketing", headers={"x-to-number": number}, timeout=10)


def test_json_and_envoy_share_one_counter_and_answer_as_the_peer(surface):
    envoy, _, url = surface
    number = uuid.uuid4().hex[:10]
    assert [envoy_get(envoy, number).status_code for _ in range(3)] == [200] * 3
    # A check (hitsAddend 0 on each descriptor) sees Envoy's three: 2 of 5 and 97 of 100 left.
    r = requests.post(url + "/json", json=marketing(number, hits=0), timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    reset = re.search(r'"durationUntilReset":"(\d+)s"', r.text)
    assert reset and 1 <= int(reset.group(1)) <= 86_400, r.text
    s = reset.group(1)
    assert r.text.startswith(
        '{"overallCode":"OK","statuses":['
        f'{{"code":"OK","currentLimit":{{"requestsPerUnit":5,"unit":"DAY"}},"limitRemaining":2,"durationUntilReset":"{s}s"}},'
        f'{{"code":"OK","currentLimit":{{"requestsPerUnit":100,"unit":"DAY"}},"limitRemaining":97,"durationUntilReset":"{s}s"}}]'
    ), r.text
    # Two debits through /json, then Envoy's sixth message is refused, and /json's too.
    assert [requests.post(url + "/json", json=marketing(number), timeout=10).status_code
            for _ in range(2)] == [200, 200]
    assert envoy_get(envoy, number).status_code == 429
    over = requests.post(url + "/json", json=marketing(number), timeout=10)
    assert over.status_code == 429, over.text
    assert over.json()["overallCode"] == "OVER_LIMIT"
    assert over.json()["statuses"][0]["code"] == "OVER_LIMIT"


def test_bad_json_is_a_400_naming_the_field(surface):
    _, _, url = surface
    r = requests.post(url + "/json", data=b'{"domain":"messaging","descriptors":[{"entries":[{"key":7}]}]}',
                      headers={"content-type": "application/json"}, timeout=10)
    assert r.status_code == 400
    assert r.text == "Bad Request: descriptors[0].entries[0].key: expected a string, got a number\n"


def test_healthcheck_and_rlconfig_as_the_peer(surface):
    _, backend, url = surface
    h = requests.get(url + "/healthcheck", timeout=10)
    assert (h.status_code, h.text) == (200, "OK")
    page = requests.get(url + "/rlconfig", timeout=10).text
    assert ("messaging.message_type_marketing.to_number: unit=DAY requests_per_unit=5, "
            "shadow_mode: false, quota_mode: false\n") in page
    assert "messaging.ldap: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n" in page
    # Given an address of its own, the surface is not on the admin listener: whatever that answers
    # (404, or the dashboard's page where dashboard/dist has been built), not the peer's "OK".
    admin = requests.get(backend.admin_url + "/healthcheck", timeout=10)
    assert (admin.status_code, admin.text) != (200, "OK"), admin.headers
