#!/bin/sh
# Build the project's images: `make image` (cpu), or
#
#   sh cluster/image/build.sh [cpu|gpu]     # tag genselect-rl:<version>-<flavour>, version from pyproject.toml
#
# BASE=local (default): the base is cluster/image/base.sh's debootstrapped Debian 12 with Python 3.11, built here
# (no registry needed: Debian's mirror and PyPI only). BASE=official: the Dockerfile's default, the official
# rayproject/ray image (pulled from Docker Hub). BASE=<image>: any image with Python 3.11 and pip first on PATH
# and a user `ray`. A Docker engine is started (python -m sandbox.engine start) when none answers; the build
# runs on the host network. A pinned torch wheel found in pip's find-links folders (PIP_FIND_LINKS, pip config)
# is served to the build over loopback instead of the PyTorch index.
set -eu
cd "$(dirname "$0")/../.."
FLAVOUR="${1:-cpu}"
case "$FLAVOUR" in cpu|gpu) ;; *) echo "build.sh: flavour must be cpu or gpu, not $FLAVOUR" >&2; exit 2 ;; esac
VERSION=$(sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml)
TAG="genselect-rl:$VERSION-$FLAVOUR"
[ "${TAG_ONLY:-0}" = 1 ] && { echo "$TAG"; exit 0; }  # what the KubeRay manifests must name (tests/cluster/test_image.py)
PY=.venv/bin/python; [ -x "$PY" ] || PY=python3
start=$(date +%s)

docker info >/dev/null 2>&1 || "$PY" -m sandbox.engine start
set -- --network host -f "cluster/image/Dockerfile.$FLAVOUR" -t "$TAG"
case "${BASE:-local}" in
  official) ;;
  local) sh cluster/image/base.sh genselect-base:bookworm-py311; set -- "$@" --build-arg BASE=genselect-base:bookworm-py311 ;;
  *) set -- "$@" --build-arg "BASE=$BASE" ;;
esac

SERVER=""
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; true' EXIT
if [ "$FLAVOUR" = cpu ]; then
  TORCH=$(sed -n 's/^torch==\([^ ]*\).*/\1/p' requirements/cpu-constraints.txt)
  LINKS="${PIP_FIND_LINKS:-} $("$PY" -m pip config get global.find-links 2>/dev/null || true)"
  for dir in $LINKS; do
    if ls "$dir"/torch-"$TORCH"-cp311-*.whl >/dev/null 2>&1; then
      # the same port every time when free: the URL is part of the build cache's key for the pip layer
      PORT=$("$PY" -c 'import socket, sys, zlib
s = socket.socket()
try: s.bind(("127.0.0.1", 20000 + zlib.crc32(sys.argv[1].encode()) % 10000))
except OSError: s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])' "$dir")
      "$PY" -m http.server --bind 127.0.0.1 --directory "$dir" "$PORT" >/dev/null 2>&1 &
      SERVER=$!
      echo "torch $TORCH from $dir (served on 127.0.0.1:$PORT for the build)"
      set -- "$@" --build-arg TORCH_INDEX= --build-arg "WHEELS=http://127.0.0.1:$PORT/"
      break
    fi
  done
fi

docker build "$@" .
size=$(docker image inspect -f '{{.Size}}' "$TAG")
echo "built $TAG in $(( $(date +%s) - start )) s; $(( size / 1000000 )) MB"
