#!/usr/bin/env bash
# Install the pinned Codex CLI into .ci/node/codex (idempotent) and print the path of a working
# `codex` executable as the last line of output. Tests read it from PLAN_RUNNER_CODEX.
#
# @openai/codex is a small Node launcher; the native binary comes in its optional dependency
# @openai/codex-linux-x64 (an alias of @openai/codex@<version>-linux-x64) from the npm registry
# itself, so nothing is downloaded at install time. It has its own npm prefix so that installing
# it never prunes the Claude Code CLI in .ci/node (both are installed with --no-save), and a
# .gitignore of its own so the ~400 MB binary is never committed.
set -euo pipefail
VERSION=${CODEX_VERSION:-0.171.0}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="$ROOT/.ci/node/codex"
BIN="$PREFIX/node_modules/.bin/codex"

works() { [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q " $VERSION$"; }

if works "$BIN"; then
  echo "$BIN"
  exit 0
fi
command -v npm >/dev/null || { echo "install-codex: npm is required (apt-get install -y npm)" >&2; exit 1; }
mkdir -p "$PREFIX"
printf '*\n' > "$PREFIX/.gitignore"
[ -f "$PREFIX/package.json" ] || printf '{"name": "plan-runner-codex", "private": true}\n' > "$PREFIX/package.json"
echo "install-codex: installing @openai/codex@$VERSION into $PREFIX" >&2
npm install --prefix "$PREFIX" --no-save --no-audit --no-fund "@openai/codex@$VERSION" >&2
if works "$BIN"; then
  echo "$BIN"
  exit 0
fi
echo "install-codex: Codex $VERSION installed but $BIN does not run" >&2
exit 1
