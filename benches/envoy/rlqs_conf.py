#!/usr/bin/env python3
"""The benches' RLQS configuration, read from envoy/rlqs.yaml (the stock-Envoy configuration the
docs give and tests/e2e/test_configs.py validates), so the benches measure that configuration and
not a copy of it: its fail-closed listener `rlqs_closed` (the quota filter,
envoy.filters.http.rate_limit_quota: bucket {name: user, user: <x-user-id>}, DENY_ALL until
sluice's first assignment, so a request measured without sluice's share in force is a 429) and
its cluster `sluice_rlqs` (HTTP/2 to the backend's gRPC listener).

    rlqs_conf.py merge IN OUT LISTEN_PORT SLUICE_GRPC_PORT

writes IN (a rendered Envoy configuration with a cluster named `upstream`, as envoy/bench.yaml's)
to OUT (JSON, which Envoy reads as YAML) with the listener `rlqs_closed` on LISTEN_PORT routing to
that `upstream` cluster, and the cluster `sluice_rlqs` to SLUICE_GRPC_PORT (benches/envoy/run.sh's
rlqs rows). benches/envoy/callgrind.py takes the quota filter block alone (`quota_filter`).
"""
import json
import string
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[2] / "envoy" / "rlqs.yaml"
FILTER = "envoy.filters.http.rate_limit_quota"


def _yaml():
    try:
        import yaml
    except ImportError:
        sys.exit("sluice bench: reading envoy/rlqs.yaml needs PyYAML (python3-yaml)")
    return yaml


def load(listen_port=1, grpc_port=1):
    """envoy/rlqs.yaml rendered (the fail-closed listener on `listen_port`, the RLQS cluster to
    `grpc_port`; its other ports 1, unused) and parsed."""
    ports = {"ENVOY_ADMIN_PORT": 1, "LISTEN_OPEN_PORT": 1, "LISTEN_CLOSED_PORT": listen_port,
             "SLUICE_GRPC_PORT": grpc_port, "UPSTREAM_PORT": 1}
    return _yaml().safe_load(string.Template(TEMPLATE.read_text()).substitute(ports))


def closed_listener(doc):
    return next(li for li in doc["static_resources"]["listeners"] if li["name"] == "rlqs_closed")


def quota_filter(cluster_name):
    """The quota filter block of the fail-closed listener, its RLQS server `cluster_name`."""
    hcm = closed_listener(load())["filter_chains"][0]["filters"][0]["typed_config"]
    block = next(f for f in hcm["http_filters"] if f["name"] == FILTER)
    block["typed_config"]["rlqs_server"] = {"envoy_grpc": {"cluster_name": cluster_name}}
    return block


def merge(src, out, listen_port, grpc_port):
    conf = _yaml().safe_load(Path(src).read_text())
    rlqs = load(int(listen_port), int(grpc_port))
    resources = conf["static_resources"]
    if not any(c["name"] == "upstream" for c in resources["clusters"]):
        sys.exit(f"sluice bench: {src} has no cluster `upstream` for the rlqs listener")
    resources["listeners"].append(closed_listener(rlqs))
    resources["clusters"].append(next(c for c in rlqs["static_resources"]["clusters"] if c["name"] == "sluice_rlqs"))
    Path(out).write_text(json.dumps(conf, indent=1))


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "merge":
        merge(*sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
