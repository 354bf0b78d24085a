#!/usr/bin/env bash
# Install what the web console's browser tests drive, from Debian: chromium and
# chromium-driver (Selenium finds the driver on PATH; nothing is downloaded at run time).
# Safe to run again: it installs only what is missing.
set -euo pipefail
exec "$(dirname "$0")/apt-install.sh" chromium chromium-driver
