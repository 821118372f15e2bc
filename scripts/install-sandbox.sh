#!/usr/bin/env bash
# Installs what the command sandbox builds on: bubblewrap (bwrap), which gives commands their
# own mount and PID namespaces (docs/security.md). Idempotent: does nothing when it is there.
set -euo pipefail

if command -v bwrap >/dev/null 2>&1; then
    echo "install-sandbox: $(bwrap --version) already installed"
    exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
    sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends bubblewrap
bwrap --version
