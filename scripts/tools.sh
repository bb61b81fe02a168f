#!/usr/bin/env bash
# Installs the Go-based developer tools at pinned versions into $(go env GOPATH)/bin.
set -euo pipefail
bin="$(go env GOPATH)/bin"
install() { # name module@version
  if [ ! -x "$bin/$1" ] || ! grep -qx "$2" "$bin/.$1.version" 2>/dev/null; then
    echo "tools: go install $2"
    go install "$2"
    echo "$2" >"$bin/.$1.version"
  fi
}
for t in "$@"; do
  case "$t" in
    protoc-gen-go) install protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.11 ;;
    protoc-gen-go-grpc) install protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2 ;;
    tflint) install tflint github.com/terraform-linters/tflint@v0.61.0 ;;
    golangci-lint) install golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.6.2 ;;
    helm) install helm helm.sh/helm/v3/cmd/helm@v3.22.0 ;;
    *) echo "unknown tool $t" >&2; exit 1 ;;
  esac
done
