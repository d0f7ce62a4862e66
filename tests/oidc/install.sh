#!/usr/bin/env bash
# Install the test OpenID provider (npm `oidc-provider`, the version pinned in
# tests/oidc/package.json, exactly as tests/oidc/package-lock.json says) OUTSIDE the repo,
# in a cache folder keyed by that version, and only when it is absent or its lock differs:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/outbox-monitor/oidc-provider-<version>
# Prints that folder on the last line of stdout (tests/oidc_support.py reads it); the
# provider script tests/oidc/provider.mjs is given it as OIDC_PROVIDER_HOME.
# Needs node and npm (the npm registry); ≈ 3 s the first time, ≈ 0.1 s afterwards.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's/^ *"oidc-provider": *"\([^"]*\)".*/\1/p' "$here/package.json" | head -n1)"
if [ -z "$version" ]; then
  echo "install.sh: no oidc-provider version in $here/package.json" >&2
  exit 1
fi
cache="${XDG_CACHE_HOME:-$HOME/.cache}/outbox-monitor"
target="$cache/oidc-provider-$version"

if [ -f "$target/node_modules/oidc-provider/package.json" ] \
  && cmp -s "$here/package-lock.json" "$target/package-lock.json"; then
  echo "$target"
  exit 0
fi

command -v npm >/dev/null 2>&1 || {
  echo "install.sh: npm is needed to install oidc-provider $version (apt-get install npm)" >&2
  exit 1
}
mkdir -p "$cache"
# Install beside the target, then move it in place: a run that is interrupted (or a
# concurrent one) never leaves a half-installed folder at the cached path.
staging="$(mktemp -d "$cache/.oidc-provider-$version.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
cp "$here/package.json" "$here/package-lock.json" "$staging/"
echo "installing oidc-provider $version into $target" >&2
(cd "$staging" && npm ci --omit=dev --no-audit --no-fund --loglevel=error >&2)
rm -rf "$target"
if ! mv -T "$staging" "$target" 2>/dev/null; then
  # another run moved its copy in first: keep that one if it is complete
  cmp -s "$here/package-lock.json" "$target/package-lock.json" || exit 1
fi
echo "$target"
