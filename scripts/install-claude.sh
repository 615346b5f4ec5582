#!/usr/bin/env bash
# Install the pinned Claude Code CLI into .ci/node (idempotent) and print the path of a working
# `claude` executable as the last line of output. Tests read it from PLAN_RUNNER_CLAUDE.
#
# The npm package is a thin wrapper whose postinstall copies a native binary (shipped in the
# optional dependency @anthropic-ai/claude-code-linux-x64, from the npm registry itself) over a
# placeholder. The native binary runs on any Node version; npm may skip the postinstall, so we
# check the result and fall back to running it, then to the platform package's binary.
set -euo pipefail
VERSION=${CLAUDE_CODE_VERSION:-2.1.332}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="$ROOT/.ci/node"
PKG="$PREFIX/node_modules/@anthropic-ai/claude-code"

works() { [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q "^$VERSION "; }

find_claude() {
  local candidate
  for candidate in "$PREFIX/node_modules/.bin/claude" "$PKG/bin/claude.exe" \
    "$PREFIX"/node_modules/@anthropic-ai/claude-code-linux-*/claude; do
    if works "$candidate"; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

if found=$(find_claude); then
  echo "$found"
  exit 0
fi

command -v npm >/dev/null || { echo "install-claude: npm is required (apt-get install -y npm)" >&2; exit 1; }
mkdir -p "$PREFIX"
echo "install-claude: installing @anthropic-ai/claude-code@$VERSION into $PREFIX" >&2
npm install --prefix "$PREFIX" --no-save --no-audit --no-fund --foreground-scripts \
  "@anthropic-ai/claude-code@$VERSION" >&2
if ! works "$PKG/bin/claude.exe" && [ -f "$PKG/install.cjs" ]; then
  (cd "$PKG" && node install.cjs >&2) || true
fi
if found=$(find_claude); then
  echo "$found"
  exit 0
fi
echo "install-claude: Claude Code $VERSION installed but no working executable found under $PREFIX" >&2
exit 1
