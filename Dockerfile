# cortex images. One image runs every service; pick the service with the command:
#
#   docker build -t cortex .                                    # CPU image (the default, last stage)
#   docker build -t cortex-worker-cuda --target worker-cuda .   # NVIDIA GPU worker (linux/amd64 only)
#
#   docker run --rm -p 31313:31313 cortex                       # all-in-one: NATS + every service
#   docker run --rm -e CORTEX_NATS_URL=nats://nats:4222 cortex serve router
#
# docker-compose.yml and k8s/ run one service per container (`serve <service>`).

ARG NODE_IMAGE=node:24-bookworm-slim
# CUDA 12 runtime: node-llama-cpp's main CUDA binary links CUDA 13, and its linux-x64-cuda-ext package
# carries a CUDA 12 fallback that it loads when the CUDA 13 libraries are missing. This 12.8 image
# needs driver >= 570 (its NVIDIA_REQUIRE_CUDA=cuda>=12.8 is enforced by the NVIDIA container runtime);
# CUDA 13 needs >= 580. Pass an older 12.x runtime image for older drivers, a 13.x one for newer hosts.
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu22.04
ARG NATS_IMAGE=nats:2-alpine

# ---------------------------------------------------------------------------------------------------
# nats-server binary (static Go build) for the all-in-one `cortex serve`, which starts a local NATS
# when none answers. Services started one per container never use it.
FROM ${NATS_IMAGE} AS nats

# ---------------------------------------------------------------------------------------------------
# Just the npm manifests, so that `npm ci` below is cached until a package.json or the lockfile
# changes (source edits alone do not reinstall ~1 GB of dependencies).
FROM ${NODE_IMAGE} AS manifests
WORKDIR /src
COPY . .
RUN mkdir -p /out \
 && cp package.json package-lock.json /out/ \
 && for f in libs/*/package.json apps/*/package.json; do \
      if [ -f "$f" ]; then cp --parents "$f" /out/; fi; \
    done

# ---------------------------------------------------------------------------------------------------
FROM ${NODE_IMAGE} AS build
WORKDIR /app
# node-llama-cpp's postinstall probes for (and may try to compile) a llama.cpp binary. Skip it: the
# prebuilt binaries come in the @node-llama-cpp/* packages and the worker never builds (build: 'never').
ENV NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
COPY --from=manifests /out/ ./
RUN --mount=type=cache,target=/root/.npm npm ci --no-audit --no-fund
COPY . .
RUN npm run build \
 && npm prune --omit=dev --no-audit --no-fund
# Assemble the runtime tree in /out: the root package.json ("type": "module"), the pruned node_modules
# (its @cortex/* entries are links to ../../libs/*), and each app's and lib's dist/ (the CLI loads
# apps/<service>/dist/main.js by path), with the vendors' chat templates the family fixtures carry
# (config/families.yaml). Sources, tests and build info stay behind.
RUN mkdir -p /out \
 && cp -a package.json node_modules config /out/ \
 && for dir in apps/* libs/*; do \
      if [ -d "$dir/dist" ]; then \
        mkdir -p "/out/$dir" && cp -a "$dir/dist" "/out/$dir/"; \
        if [ -f "$dir/package.json" ]; then cp "$dir/package.json" "/out/$dir/"; fi; \
      fi; \
    done \
 && cp -a apps/gateway/console /out/apps/gateway/ \
 && cp -a libs/fixtures/templates /out/libs/fixtures/ \
 && find /out/apps /out/libs -name '*.tsbuildinfo' -delete

# The CPU image carries no GPU binaries: CUDA (~540 MB) and Vulkan (no loader in the image anyway).
# @fugood/llama.node (the vision engine) installs every variant of its own as an optional package:
# its CUDA (196 MB), Vulkan (59 MB) and WebAssembly (19 MB) builds go too, its CPU build stays.
FROM build AS app-cpu
RUN rm -rf /out/node_modules/@node-llama-cpp/*-cuda* /out/node_modules/@node-llama-cpp/*-vulkan* \
      /out/node_modules/@fugood/node-llama-*-cuda* /out/node_modules/@fugood/node-llama-*-vulkan* \
      /out/node_modules/@fugood/node-llama-wasm

# The CUDA image keeps both CUDA packages: linux-x64-cuda (CUDA 13) and linux-x64-cuda-ext (CUDA 12).
# llama.node's CUDA build links CUDA 12 (cudart, cuBLAS, NCCL) and carries sm_89 code and compute_89
# PTX only: an Ada GPU runs it, a Hopper one compiles the PTX at first load, an Ampere one cannot
# (docs/deployment.md, "Serving a vision model").
FROM build AS app-cuda
RUN rm -rf /out/node_modules/@node-llama-cpp/*-vulkan* \
      /out/node_modules/@fugood/node-llama-*-vulkan* /out/node_modules/@fugood/node-llama-wasm

# ---------------------------------------------------------------------------------------------------
# NVIDIA GPU worker. Needs the NVIDIA container runtime on the host (compose: a device reservation;
# Kubernetes: the NVIDIA device plugin and an nvidia.com/gpu limit). The container sees only the
# GPUs it was given, numbered from 0, so leave CORTEX_WORKER_DEVICE unset.
FROM ${CUDA_IMAGE} AS worker-cuda
# Node from the same image the app was built with; its binary needs glibc >= 2.28 (Ubuntu 22.04: 2.35).
COPY --from=build /usr/local/bin/node /usr/local/bin/node
# uid 1000, as in the CPU image (where it is the node image's `node` user), so volumes work with both.
RUN if ! getent passwd 1000 >/dev/null; then \
      groupadd --gid 1000 cortex && useradd --uid 1000 --gid 1000 --home-dir /app --no-create-home --shell /usr/sbin/nologin cortex; \
    fi
WORKDIR /app
COPY --from=app-cuda /out/ ./
RUN mkdir -p /models /app/.cortex && chown 1000:1000 /models /app/.cortex
ENV NODE_ENV=production \
    CORTEX_WORKER_GPU=cuda \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 1000:1000
ENTRYPOINT ["node", "apps/cli/dist/main.js"]
CMD ["serve", "worker"]

# ---------------------------------------------------------------------------------------------------
# The default image: every service, CPU inference. Last stage, so a plain `docker build .` makes it.
FROM ${NODE_IMAGE} AS runtime
LABEL org.opencontainers.image.title="cortex" \
      org.opencontainers.image.description="Inference gateway for GPU fleets: OpenAI, Responses and Anthropic APIs over NATS to node-llama-cpp workers" \
      org.opencontainers.image.licenses="MIT"
COPY --from=nats /usr/local/bin/nats-server /usr/local/bin/nats-server
WORKDIR /app
COPY --from=app-cpu /out/ ./
# /models: the models volume (a new named volume copies this owner). /app/.cortex: the default
# config's models_dir and the all-in-one launcher's NATS store, relative to /app.
RUN mkdir -p /models /app/.cortex && chown node:node /models /app/.cortex
# In a container the gateway and metrics must listen on every interface to be reachable at all. These
# win over the config file's listen addresses; override them with -e to move the ports.
ENV NODE_ENV=production \
    CORTEX_LISTEN=0.0.0.0:31313 \
    CORTEX_METRICS_LISTEN=0.0.0.0:31314
EXPOSE 31313 31314
# The node image's `node` user, by number so that Kubernetes' runAsNonRoot can verify it.
USER 1000:1000
ENTRYPOINT ["node", "apps/cli/dist/main.js"]
CMD ["serve"]
