#!/usr/bin/env bash
# Install what the web console's browser tests drive, from Debian: chromium and
# chromium-driver (Selenium finds the driver on PATH; nothing is downloaded at run time).
# Safe to run again: it installs only what is missing.
set -euo pipefail
missing=()
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
installed chromium || missing+=(chromium)
installed chromium-driver || missing+=(chromium-driver)
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
