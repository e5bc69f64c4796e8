#!/bin/sh
# Build the sandbox's Docker image WITHOUT a registry: debootstrap a minimal Debian root filesystem that has
# python3, then `docker import` it. Needs root, debootstrap, a reachable Debian mirror and a running engine.
#
#   sudo sh sandbox/docker/build_image.sh [IMAGE_TAG] [MIRROR]
#
# IMAGE_TAG defaults to genselect-sandbox:bookworm (SandboxConfig.docker_image's default); MIRROR defaults to
# the first Debian mirror in apt's sources (http://deb.debian.org/debian otherwise). Idempotent: an image built
# by this version of the script (label genselect.recipe) is left alone unless FORCE=1; one built by another
# version is replaced. Takes 1-2.5 min. The image holds only Debian's python3 and its stdlib; it runs as 65534.
set -eu
TAG="${1:-genselect-sandbox:bookworm}"
MIRROR="${2:-}"
SUITE="${SUITE:-bookworm}"
RECIPE=$(sha256sum "$0" | cut -c1-16)

if ! command -v docker >/dev/null 2>&1; then echo "build_image.sh: the docker CLI is missing (apt-get install docker.io)" >&2; exit 1; fi
if ! docker info >/dev/null 2>&1; then echo "build_image.sh: no Docker engine answers (python -m sandbox.engine start)" >&2; exit 1; fi
if [ "${FORCE:-0}" != 1 ] && [ "$(docker image inspect -f '{{index .Config.Labels "genselect.recipe"}}' "$TAG" 2>/dev/null)" = "$RECIPE" ]; then
  echo "image $TAG is current (FORCE=1 rebuilds)"; exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then echo "build_image.sh: debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; fi
if [ -z "$MIRROR" ]; then
  MIRROR=$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
           | awk '{print $2}' | head -n1)
  MIRROR="${MIRROR:-http://deb.debian.org/debian}"
fi

ROOT=$(mktemp -d /var/tmp/genselect-sandbox-rootfs.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
chmod 0755 "$ROOT"  # becomes the image's /: mktemp's 0700 would lock user 65534 out of everything
echo "debootstrap $SUITE from $MIRROR into $ROOT"
debootstrap --variant=minbase --include=python3 "$SUITE" "$ROOT" "$MIRROR"
# Trim what a verifier never needs; keep python3's stdlib intact.
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/doc/* \
       "$ROOT"/usr/share/man/* "$ROOT"/usr/share/locale/*
tar -C "$ROOT" -c . | docker import \
  --change 'USER 65534:65534' --change 'WORKDIR /tmp' --change 'ENV LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1' \
  --change "LABEL genselect.recipe=$RECIPE" --change 'CMD ["/usr/bin/python3"]' - "$TAG"
docker run --rm --network none --user 65534:65534 "$TAG" /usr/bin/python3 -c 'import sys; print("ok", sys.version)'
echo "built $TAG"
