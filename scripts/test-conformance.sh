#!/usr/bin/env bash
# npm run test:conformance — the OpenResponses project's own compliance suite against cortex, as a user
# would run it (its README's steps):
#
#   1. the suite, which is third-party and not part of cortex, is copied from
#      ../shared/conformance/openresponses (or CORTEX_CONFORMANCE_SUITE) into a temporary directory, where
#      its two dependencies (zod 3, tsx) are installed from npm;
#   2. the stack is started as `npm start` starts it (`cortex serve`, the default catalogue) on free
#      ports, with its own NATS server and model directory in the temporary directory;
#   3. every test runs on cortex-chat, the tool-calling test on cortex-tools (the fixture that calls
#      tools) and the image-input test on cortex-vision (the fixture with a projector); none may fail;
#   4. anything else that fails, or a llama.cpp training-context warning in the stack's log, fails this.
#
# Everything started is stopped and the temporary directory removed, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SUITE=${CORTEX_CONFORMANCE_SUITE:-$ROOT/../shared/conformance/openresponses}
EXPECTED_FAILURES=""
TEMP=$(mktemp -d)
STACK_PID=""

cleanup() {
  if [ -n "$STACK_PID" ] && kill -0 "$STACK_PID" 2>/dev/null; then
    kill -INT "$STACK_PID" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$STACK_PID" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$STACK_PID" 2>/dev/null || true
  fi
  rm -rf "$TEMP"
}
trap cleanup EXIT

if [ ! -f "$SUITE/bin/compliance-test.ts" ]; then
  echo "conformance: no suite at $SUITE (set CORTEX_CONFORMANCE_SUITE)" >&2
  exit 1
fi

free_port() {
  node -e "const s = require('net').createServer().listen(0, '127.0.0.1', () => { console.log(s.address().port); s.close(); });"
}

echo "conformance: the suite from $SUITE, in $TEMP/suite"
mkdir -p "$TEMP/suite" "$TEMP/run"
cp -r "$SUITE/bin" "$SUITE/src" "$TEMP/suite/"
echo '{"private":true,"type":"module"}' > "$TEMP/suite/package.json"
(cd "$TEMP/suite" && npm i --no-audit --no-fund --silent zod@3.25.76 tsx >/dev/null)

npm run build --silent
GATEWAY_PORT=$(free_port)
METRICS_PORT=$(free_port)
NATS_PORT=$(free_port)
BASE="http://127.0.0.1:$GATEWAY_PORT"
echo "conformance: starting the stack on $BASE"
(
  cd "$TEMP/run"
  CORTEX_CONFIG="$ROOT/config/cortex.yaml" CORTEX_LISTEN="127.0.0.1:$GATEWAY_PORT" CORTEX_METRICS_LISTEN="127.0.0.1:$METRICS_PORT" \
    CORTEX_NATS_URL="nats://127.0.0.1:$NATS_PORT" exec node "$ROOT/apps/cli/dist/main.js" serve
) >"$TEMP/stack.log" 2>&1 &
STACK_PID=$!

ready=""
for _ in $(seq 1 180); do
  if curl -sf "$BASE/readyz" >/dev/null 2>&1; then ready=yes; break; fi
  kill -0 "$STACK_PID" 2>/dev/null || break
  sleep 1
done
if [ -z "$ready" ]; then
  echo "conformance: the stack did not become ready within 180 s; its log:" >&2
  tail -50 "$TEMP/stack.log" >&2
  exit 1
fi

# Node 22 has WebSocket built in; Node 20 needs the flag for the suite's WebSocket tests.
WS_FLAG=""
node -e 'process.exit(typeof WebSocket === "function" ? 0 : 1)' || WS_FLAG="--experimental-websocket"
run_suite() {
  local model=$1 out=$2
  shift 2
  # shellcheck disable=SC2086
  (cd "$TEMP/suite" && timeout 600 node $WS_FLAG --import tsx bin/compliance-test.ts -u "$BASE/v1" -k none -m "$model" --json "$@" >"$out") || true
}
run_suite cortex-chat "$TEMP/chat.json"
run_suite cortex-tools "$TEMP/tools.json" --filter tool-calling
run_suite cortex-vision "$TEMP/vision.json" --filter image-input

set +e
node - "$TEMP/chat.json" "$TEMP/tools.json" "$TEMP/vision.json" "$EXPECTED_FAILURES" <<'EOF'
const { readFileSync } = require('node:fs');
const [chatPath, toolsPath, visionPath, expected] = process.argv.slice(2);
const read = (path) => {
  try {
    return JSON.parse(readFileSync(path, 'utf8')).results;
  } catch (error) {
    console.error(`conformance: ${path} is not the suite's JSON report: ${error.message}`);
    process.exit(1);
  }
};
const byId = new Map(read(chatPath).map((r) => [r.id, { ...r, model: 'cortex-chat' }]));
for (const r of read(toolsPath)) byId.set(r.id, { ...r, model: 'cortex-tools' });
for (const r of read(visionPath)) byId.set(r.id, { ...r, model: 'cortex-vision' });
const allowed = new Set(expected.split(',').filter(Boolean));
let unexpected = 0;
for (const r of byId.values()) {
  const ok = r.status === 'passed' || (r.status === 'failed' && allowed.has(r.id));
  if (!ok) unexpected++;
  console.log(`${ok ? ' ' : '!'} ${r.status.padEnd(7)} ${r.id} (${r.model})`);
  if (r.status === 'failed') for (const e of r.errors ?? []) console.log(`            ${String(e).slice(0, 300)}`);
}
const passed = [...byId.values()].filter((r) => r.status === 'passed').length;
console.log(`conformance: ${passed}/${byId.size} passed${expected ? `; expected to fail: ${expected}` : ''}`);
if (byId.size !== 17) console.log(`conformance: expected 17 tests, the suite ran ${byId.size}`);
process.exit(unexpected > 0 || byId.size !== 17 ? 1 : 0);
EOF
status=$?
set -e

# The warning itself ("n_ctx_seq (…) < n_ctx_train (…)"), not the vision engine's log of the model's facts.
if grep -q "< n_ctx_train" "$TEMP/stack.log"; then
  echo "conformance: llama.cpp warned about a training context:" >&2
  grep "< n_ctx_train" "$TEMP/stack.log" >&2
  status=1
fi
exit $status
