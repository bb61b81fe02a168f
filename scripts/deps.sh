#!/usr/bin/env bash
# Installs what the build, tests and demo need, skipping what is present:
# Debian packages (apt), the pinned local AWS emulator (npm), Go modules
# and Go tools. Safe to run again and again.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
# Commands, by the Debian package that provides them (a command that is
# already on PATH, however it was installed, is left alone).
for pair in ffmpeg:ffmpeg pkg-config:pkg-config gcc:gcc node:nodejs npm:npm protoc:protobuf-compiler; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need_apt+=("${pair#*:}")
done
# Libraries and data.
for pkg in libpocketsphinx-dev pocketsphinx-en-us; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done
if ! command -v go >/dev/null 2>&1; then
  # Debian's Go is older than go.mod asks for; it fetches the right
  # toolchain through the module proxy (GOTOOLCHAIN=auto).
  need_apt+=(golang-go)
fi
if ((${#need_apt[@]})); then
  echo "deps: apt-get install ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if [ ! -f tools/fauxqs/node_modules/fauxqs/package.json ] ||
   [ tools/fauxqs/package-lock.json -nt tools/fauxqs/node_modules/.package-lock.json ]; then
  echo "deps: npm ci (tools/fauxqs)"
  (cd tools/fauxqs && npm ci --no-audit --no-fund --loglevel=error)
fi

export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
go mod download
