#!/usr/bin/env bash
# Build the web console's front end (src/gregor/console/web) into its dist/ directory,
# which `gregor console` serves and git ignores: built assets are never committed.
# npm ci installs exactly the committed package-lock.json, then esbuild bundles.
#
# Runs only when needed, so that set-up stays fast: dist/.built holds a hash of the
# sources and this script, node_modules/.installed one of package-lock.json; the
# build (or the install) runs again when its hash changed.
set -euo pipefail
cd "$(dirname "$0")/../src/gregor/console/web"
if ! command -v npm >/dev/null 2>&1; then
  echo "error: the web console's front end needs Node.js and npm to build: install them" \
       "(Debian: apt-get install nodejs npm) and run scripts/build-console.sh again" >&2
  exit 1
fi
digest() { sha256sum "$@" | sha256sum | cut -c1-16; }
lock=$(digest package-lock.json)
sources=$(digest package.json package-lock.json index.html ../../../../scripts/build-console.sh \
  $(find src -type f | LC_ALL=C sort))
if [ "$(cat dist/.built 2>/dev/null)" = "$sources" ]; then
  exit 0
fi
if [ "$(cat node_modules/.installed 2>/dev/null)" != "$lock" ]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock" > node_modules/.installed
fi
rm -rf dist
npm run --silent build
# The page names its assets by the sources' hash, so a browser never keeps an old bundle.
sed "s/VERSION/$sources/g" index.html > dist/index.html
echo "$sources" > dist/.built
echo "built the web console into src/gregor/console/web/dist" >&2
