#!/usr/bin/env bash
# Install n8n (the version the workflows are proven on) into a cache folder outside the
# repository, keyed by version, once: when that folder already holds a working n8n of
# this version, this does nothing. ≈ 10 min and ≈ 1.8 GB the first time (it compiles
# native modules); needs Node.js 20+ and npm with the npm registry reachable.
#
#   n8n/install.sh                 # into ${XDG_CACHE_HOME:-~/.cache}/outbox-monitor/n8n-<version>
#   N8N_VERSION=… n8n/install.sh   # another version (the workflows are proven on the default)
#
# outbox_monitor/demo/n8n_install.py (the demo's --worker n8n and tests/n8n) looks in the same folder;
# OUTBOX_MONITOR_N8N_HOME points it at an install made elsewhere.
set -euo pipefail

version="${N8N_VERSION:-1.123.81}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/outbox-monitor"
target="$cache/n8n-$version"

installed() {
  [ -x "$target/node_modules/.bin/n8n" ] &&
    [ "$("$target/node_modules/.bin/n8n" --version 2>/dev/null)" = "$version" ]
}

if installed; then
  echo "n8n $version is installed in $target"
  exit 0
fi

command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || {
  echo "error: n8n needs Node.js 20+ and npm (e.g. apt-get install nodejs npm)" >&2
  exit 1
}
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 20 ]; then
  echo "error: n8n $version needs Node.js 20 or newer; this is $(node --version)" >&2
  exit 1
fi

mkdir -p "$cache"
# one installer at a time; a second one waits, then finds the install done
exec 9>"$cache/.n8n-$version.lock"
flock 9
if installed; then
  echo "n8n $version is installed in $target"
  exit 0
fi

# Build in a scratch folder and move it into place at the end, so an interrupted
# install never looks installed.
work="$(mktemp -d "$cache/.n8n-$version.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# A plain `npm install n8n@1.123.81` fails on two of its dependencies on this Node 20;
# these overrides make it install: xlsx from a maintained republish on the npm registry,
# isolated-vm pinned to 5.0.4.
cat >"$work/package.json" <<JSON
{
  "name": "outbox-monitor-n8n",
  "private": true,
  "dependencies": {"n8n": "$version"},
  "overrides": {"xlsx": "npm:@e965/xlsx@0.20.3", "isolated-vm": "5.0.4"}
}
JSON
echo "installing n8n $version into $target (≈ 10 min, ≈ 1.8 GB; log: $work/install.log)"
started=$(date +%s)
if ! (cd "$work" && npm install --no-audit --no-fund --loglevel=error >install.log 2>&1); then
  tail -n 40 "$work/install.log" >&2
  echo "error: npm install of n8n $version failed (full log above: $work/install.log)" >&2
  trap - EXIT
  exit 1
fi
rm -rf "$target"
mv "$work" "$target"
trap - EXIT
installed || { echo "error: $target/node_modules/.bin/n8n does not run" >&2; exit 1; }
echo "n8n $version installed in $target in $(( $(date +%s) - started )) s"
