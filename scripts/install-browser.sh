#!/usr/bin/env bash
# Installs the headless browser the web app's tests drive: Debian's chromium and its
# chromedriver. Idempotent: does nothing when both are already there.
set -euo pipefail

if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
    echo "install-browser: chromium and chromedriver already installed"
    exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
    sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends chromium chromium-driver fonts-dejavu-core
/usr/bin/chromium --version
/usr/bin/chromedriver --version
