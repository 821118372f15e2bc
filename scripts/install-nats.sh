#!/usr/bin/env bash
# Installs what the cluster tests (crates/cluster, docs/cluster.md) run against: Debian's
# nats-server (2.9), started by the tests themselves as a 3-node JetStream cluster on loopback
# ports, and openssl, with which the TLS test makes its CA and server certificate. Idempotent:
# does nothing when they are there. The package enables a system service; the tests do not
# use it.
set -euo pipefail

missing=()
command -v nats-server >/dev/null 2>&1 || missing+=(nats-server)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install-nats: $(nats-server --version) and $(openssl version) already installed"
    exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
    sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
nats-server --version
openssl version
