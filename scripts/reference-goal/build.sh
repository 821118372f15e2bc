#!/usr/bin/env bash
# Bundles the reference engine as ../../../shared/tools/reference/build.sh does, plus its goal
# loop (packages/core/src/goal/goal-loop.ts, which needs the `yaml` package), so driver.mjs here
# can run goal scenarios (`runs[].goal`, docs/scenario-format.md) through the reference.
# Usage: build.sh REFERENCE_GIT_DIR OUT.mjs   (needs node >= 20 and npm)
set -euo pipefail
src=${1:?reference git dir}; out=${2:?output .mjs}
work=$(mktemp -d)
git -C "$src" archive HEAD packages/core | tar -x -C "$work"
core="$work/packages/core/src"
cat > "$work/entry.ts" <<ENTRY
export { ContextEngine } from "$core/engine/context-engine.ts";
export * from "$core/omnimessage/index.ts";
export { runGoalLoop } from "$core/goal/goal-loop.ts";
ENTRY
(cd "$work" && npm init -y >/dev/null && npm install -s esbuild@0.24 yaml@2 >/dev/null 2>&1)
"$work/node_modules/.bin/esbuild" "$work/entry.ts" --bundle --platform=node --format=esm --target=node20 --log-level=error \
  --banner:js="import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" --outfile="$out"
rm -rf "$work"
echo "$out"
