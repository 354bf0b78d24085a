#!/usr/bin/env bash
# Install what a cluster needs from Debian: the zookeeper package (ZooKeeper 3.8, a
# Java program; it pulls in a JRE if there is none). With "tests", also nftables,
# which the cluster tests use to cut network links between brokers.
# Safe to run again: it installs only what is missing.
# Usage: scripts/install-zookeeper.sh [tests]
set -euo pipefail
missing=()
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
installed zookeeper || missing+=(zookeeper)
if [ "${1:-}" = tests ]; then
  command -v nft >/dev/null 2>&1 || missing+=(nftables)
fi
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
