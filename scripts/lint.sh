#!/usr/bin/env bash
# clang-tidy over the C++ sources changed against origin/main (all of them with LINT_ALL=1).
set -euo pipefail
BUILD=${1:-build}
if [ "${LINT_ALL:-0}" = 1 ]; then
  files=$(git ls-files 'src/*.cpp' 'tools/*.cpp')
else
  base=$(git merge-base HEAD origin/main 2>/dev/null || git rev-list --max-parents=0 HEAD | tail -1)
  files=$( (git diff --name-only "$base"; git diff --name-only) | grep -E '^(src|tools)/.*\.cpp$' | sort -u || true)
fi
[ -n "$files" ] || { echo "lint: nothing changed"; exit 0; }
clang-tidy -p "$BUILD" --quiet $files
