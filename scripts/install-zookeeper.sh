#!/usr/bin/env bash
# Install what a cluster needs from Debian: the zookeeper package (ZooKeeper 3.8, a
# Java program; Java 17 is preinstalled) and nftables (cuts links in fault tests).
# Safe to run again: it installs only what is missing.
set -euo pipefail
missing=()
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
