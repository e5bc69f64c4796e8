#!/bin/sh
# A base image for cluster/image/Dockerfile.* built without a registry: a debootstrapped Debian 12 (bookworm) root
# filesystem with Debian's Python 3.11, a virtualenv first on PATH and the user `ray` (uid 1000, group users),
# which is what the Dockerfiles expect of the official rayproject/ray images. `docker import`ed.
#
#   sh cluster/image/base.sh [TAG] [MIRROR]        # root, debootstrap, a running engine; about 2 min
#
# TAG defaults to genselect-base:bookworm-py311; MIRROR to the first Debian mirror in apt's sources. An image of
# this recipe (label genselect.recipe) is kept unless FORCE=1. The CA bundle this machine's pip uses (PIP_CERT or
# pip's `cert` setting), if any, goes in as the image's PIP_CERT.
set -eu
TAG="${1:-genselect-base:bookworm-py311}"
MIRROR="${2:-}"
RECIPE=$(sha256sum "$0" | cut -c1-16)

for cmd in docker debootstrap; do
  command -v "$cmd" >/dev/null 2>&1 || { echo "base.sh: $cmd is missing (as root: sh sandbox/install.sh --docker)" >&2; exit 1; }
done
docker info >/dev/null 2>&1 || { echo "base.sh: no Docker engine answers (python -m sandbox.engine start)" >&2; exit 1; }
if [ "${FORCE:-0}" != 1 ] && [ "$(docker image inspect -f '{{index .Config.Labels "genselect.recipe"}}' "$TAG" 2>/dev/null)" = "$RECIPE" ]; then
  echo "image $TAG is current (FORCE=1 rebuilds)"; exit 0
fi
if [ -z "$MIRROR" ]; then
  MIRROR=$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
           | awk '{print $2}' | head -n1)
  MIRROR="${MIRROR:-http://deb.debian.org/debian}"
fi

ROOT=$(mktemp -d /var/tmp/genselect-base-rootfs.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
chmod 0755 "$ROOT"  # becomes the image's /: mktemp's 0700 would lock every other user out
debootstrap --variant=minbase --include=python3,python3-venv,python3-dev,ca-certificates,procps bookworm "$ROOT" "$MIRROR"
chroot "$ROOT" useradd --create-home --uid 1000 --gid users --shell /bin/bash ray
chroot "$ROOT" python3 -m venv /opt/venv
# pip inside builds on this base trusts what this machine's pip trusts (a TLS-inspecting proxy's CA, say)
CERT="${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}"
CHANGES=""
if [ -n "$CERT" ] && [ -r "$CERT" ]; then
  cp "$CERT" "$ROOT/etc/ssl/certs/pip-ca-bundle.crt"
  CHANGES="ENV PIP_CERT=/etc/ssl/certs/pip-ca-bundle.crt"
fi
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/*
tar -C "$ROOT" -c . | docker import \
  --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8 HOME=/home/ray' --change 'USER ray' --change 'WORKDIR /home/ray' \
  --change "LABEL genselect.recipe=$RECIPE" --change 'CMD ["/bin/bash"]' ${CHANGES:+--change "$CHANGES"} - "$TAG"
docker run --rm --network none "$TAG" python -c 'import sys, getpass; print("ok", getpass.getuser(), sys.prefix, sys.version)'
echo "built $TAG"
