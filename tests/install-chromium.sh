#!/bin/sh
# Debian's chromium for the browser tests (tests/e2e/test_dashboard_browser.py), run by
# `make test` and `make browser`. Idempotent and silent when a Chromium is already there.
# Playwright's own browser download is never used. When nothing can be installed this says why
# and exits 0: the browser tests then fail with the same advice (they are never skipped).
set -u
if [ -n "${DUETIME_CHROMIUM:-}" ] && [ -x "${DUETIME_CHROMIUM}" ]; then exit 0; fi
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
say() { echo "install-chromium: $*" >&2; }
if ! command -v apt-get >/dev/null 2>&1; then
  say "no apt-get on this machine: install Chromium with its package manager, or set"
  say "DUETIME_CHROMIUM to a Chromium binary; the browser tests fail without one"
  exit 0
fi
run=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    run="sudo -n"
  else
    say "not root: run 'apt-get install -y chromium' as root; the browser tests fail without it"
    exit 0
  fi
fi
say "installing Debian's chromium (apt-get install chromium)"
export DEBIAN_FRONTEND=noninteractive
if ! $run apt-get install -y -qq chromium >/dev/null 2>&1; then
  # The package lists may be missing or stale on a fresh machine.
  $run apt-get update -qq >/dev/null 2>&1
  if ! $run apt-get install -y -qq chromium >/dev/null; then
    say "apt-get could not install chromium; the browser tests fail without it"
  fi
fi
exit 0
