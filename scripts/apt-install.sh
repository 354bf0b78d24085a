#!/usr/bin/env bash
# Install the named Debian packages that are not installed yet (nothing when all are).
# The project's install scripts share it, so each says only what it needs.
# Usage: scripts/apt-install.sh PACKAGE...
set -euo pipefail
missing=()
for package in "$@"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
[ "${#missing[@]}" -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: ${missing[*]} missing and apt-get unavailable: install them by hand" >&2
  exit 1
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "installing ${missing[*]} ..." >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
