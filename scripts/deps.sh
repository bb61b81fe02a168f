#!/usr/bin/env bash
# Installs what the build, tests and demo need, skipping what is present:
# Debian packages (apt), the pinned local AWS emulator (npm), Go modules
# and Go tools. Safe to run again and again.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
# Commands, by the Debian package that provides them (promtool, from
# prometheus, checks the alert rules and dashboard queries; a command that is
# already on PATH, however it was installed, is left alone).
# java and mvn run ElasticMQ, the SQS server of the redrive tests
# (scripts/elasticmq-deps.sh).
for pair in ffmpeg:ffmpeg gcc:gcc node:nodejs npm:npm protoc:protobuf-compiler promtool:prometheus java:default-jre-headless mvn:maven; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need_apt+=("${pair#*:}")
done
# Libraries: python3-venv and libpython3.11: the virtual environment of real Triton's
# Python backend, whose stub embeds Debian's Python (scripts/triton-deps.sh).
for pkg in python3-venv libpython3.11; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done
if ! command -v go >/dev/null 2>&1; then
  need_apt+=(golang-go) # only to bootstrap the Go that go.mod asks for, below
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

# Go 1.21 and later fetch the toolchain go.mod asks for by themselves
# (GOTOOLCHAIN=auto). Older ones, like Debian bookworm's 1.19, cannot: the
# toolchain is itself a module on the Go module proxy, so the old go
# downloads it and it is installed in GO_BOOTSTRAP_ROOT.
go_minor() { go env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p'; }
minor=$(go_minor)
if [ -z "$minor" ] || [ "$minor" -lt 21 ]; then
  want=$(awk '$1 == "go" { print $2 }' go.mod)
  root="${GO_BOOTSTRAP_ROOT:-/usr/local/go}"
  link="${GO_BOOTSTRAP_LINK:-/usr/local/bin/go}"
  arch=$(dpkg --print-architecture)
  echo "deps: installing Go $want in $root (found $(go version 2>/dev/null || echo none))"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  dir=$(cd "$tmp" && go mod init bootstrap >/dev/null 2>&1 &&
    GOFLAGS=-modcacherw GOMODCACHE="$tmp/mod" GOTOOLCHAIN=local \
    go mod download -json "golang.org/toolchain@v0.0.1-go${want}.linux-${arch}" |
    sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  chmod +x "$dir"/bin/* "$dir"/pkg/tool/*/*
  rm -rf "$root" && mkdir -p "$(dirname "$root")" && cp -a "$dir" "$root"
  mkdir -p "$(dirname "$link")"
  ln -sf "$root/bin/go" "$link"
  ln -sf "$root/bin/gofmt" "$(dirname "$link")/gofmt"
  hash -r
  export PATH="$(dirname "$link"):$PATH"
  go version
fi

export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
go mod download

scripts/triton-deps.sh
scripts/moto-deps.sh
scripts/elasticmq-deps.sh
