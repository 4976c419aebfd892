#!/usr/bin/env bash
# Makes the base image `layerps-base:bookworm` without an image registry: a Debian 12
# (bookworm) root file system made by debootstrap from this machine's Debian mirror,
# imported into podman's image store. The Dockerfile's stages start FROM it.
#
#   deploy/make-base-image.sh [IMAGE]     default IMAGE: layerps-base:bookworm
#
#   MIRROR=URL     the Debian mirror (default: the one apt uses here, from
#                  /etc/apt/sources.list*; else http://deb.debian.org/debian)
#   ROOTFS=DIR     where debootstrap builds (default /var/tmp/layerps-rootfs; removed after)
#
# Needs root, debootstrap and podman (Debian packages; installed when missing). Takes a few
# minutes (debootstrap downloads ~40 MB of packages). Prints the image's size at the end.
set -euo pipefail
IMAGE="${1:-layerps-base:bookworm}"
case "$IMAGE" in -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "make-base-image: needs root (debootstrap, podman import)" >&2; exit 1; }

need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v podman >/dev/null || need+=(podman)
if [ ${#need[@]} -gt 0 ]; then
  echo "== apt-get install ${need[*]}"
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi

# The mirror apt uses here: the first URI that names a .../debian archive (deb822 .sources
# files or one-line sources.list entries), security archives left out.
mirror_from_apt() {
  local f
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    grep -hoE '(^URIs:[[:space:]]*|^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)[a-z]+://[^[:space:]]+/debian/?([[:space:]]|$)' "$f" |
      grep -oE '[a-z]+://[^[:space:]]+' | head -1
  done | head -1
}
MIRROR="${MIRROR:-$(mirror_from_apt)}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
MIRROR="${MIRROR%/}"
SECURITY="${SECURITY_MIRROR:-${MIRROR%/debian}/debian-security}"
ROOTFS="${ROOTFS:-/var/tmp/layerps-rootfs}"

echo "== debootstrap --variant=minbase bookworm $ROOTFS $MIRROR"
rm -rf "$ROOTFS"
start=$(date +%s)
debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 || {
  echo "make-base-image: debootstrap failed; the end of $ROOTFS.log:" >&2
  tail -n 30 "$ROOTFS.log" >&2
  exit 1
}

# apt inside the image uses the same mirror, with the updates and security suites.
rm -f "$ROOTFS/etc/apt/sources.list"
cat >"$ROOTFS/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
# Slim: no package cache, no lists (each stage's apt-get update fetches them), no docs,
# no translations.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/cache/apt/*.bin \
  "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* \
  "$ROOTFS"/usr/share/info/*
find "$ROOTFS/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
# As Debian's slim images: no docs, man pages or translations from later installs either.
cat >"$ROOTFS/etc/dpkg/dpkg.cfg.d/01-nodoc" <<'NODOC'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
NODOC
echo 'APT::Install-Recommends "false";' >"$ROOTFS/etc/apt/apt.conf.d/01-norecommends"
: >"$ROOTFS/etc/hostname"

echo "== podman import -> $IMAGE"
tar --numeric-owner -C "$ROOTFS" -c . |
  podman import --quiet --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$IMAGE" >/dev/null
rm -rf "$ROOTFS" "$ROOTFS.log"
echo "make-base-image: $IMAGE from $MIRROR in $(( $(date +%s) - start )) s," \
  "$(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}')"
