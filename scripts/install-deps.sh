#!/usr/bin/env bash
# Installs the Debian packages pagoda needs to build and test, if any is missing.
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev libsentencepiece-dev libxxhash-dev libssl-dev libomp-dev
  python3 python3-venv python3-jinja2
  prometheus
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
fi
