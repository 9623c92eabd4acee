#!/usr/bin/env bash
# System packages the tests use: Debian's chromium (the HTML report is opened headless).
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "chromium missing and cannot be installed here: the HTML report test will be skipped" >&2
  fi
fi
