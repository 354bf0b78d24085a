#!/usr/bin/env bash
# Install what a cluster needs from Debian: the zookeeper package (ZooKeeper 3.8, a
# Java program; it pulls in a JRE if there is none). With "tests", also nftables,
# which the cluster tests use to cut network links between brokers.
# Safe to run again: it installs only what is missing.
# Usage: scripts/install-zookeeper.sh [tests]
set -euo pipefail
packages=(zookeeper)
[ "${1:-}" = tests ] && packages+=(nftables)
exec "$(dirname "$0")/apt-install.sh" "${packages[@]}"
