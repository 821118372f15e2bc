#!/usr/bin/env bash
# Installs the MCP servers penguin's MCP tests talk to, into target/mcp-servers (or $1).
# Idempotent: a second run with the same pinned versions does nothing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/target/mcp-servers}"
# Pinned so a test run is reproducible; bump together with the tests' expectations.
packages=(
  "@modelcontextprotocol/server-everything@2026.8.31"
  "@modelcontextprotocol/server-filesystem@2026.8.31"
)
stamp="$dest/.installed"
want="${packages[*]}"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "install-mcp-servers: npm not found; installing nodejs and npm from the system packages" >&2
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
mkdir -p "$dest"
npm install --prefix "$dest" --no-audit --no-fund --loglevel=error "${packages[@]}"
printf '%s' "$want" >"$stamp"
