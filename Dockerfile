# syntax=docker/dockerfile:1
#
# fencegate image: Node.js 24 LTS (slim), non-root (uid 1000), config at /etc/fencegate/fencegate.yaml,
# SQLite data in the volume /var/lib/fencegate.
#
#   docker build -t fencegate .
#   docker run -d --name fencegate -p 8080:8080 -p 9464:9464 \
#     -e UPSTREAM_URL=http://payments:9090 -e FENCEGATE_ADMIN_TOKEN=change-me \
#     -v fencegate-data:/var/lib/fencegate fencegate
#
# Your own config: -v $PWD/fencegate.yaml:/etc/fencegate/fencegate.yaml:ro (listen on 0.0.0.0).

ARG NODE_IMAGE=node:24-slim

# ---- build: compile TypeScript, then reduce node_modules to production dependencies ----------
FROM ${NODE_IMAGE} AS build
# better-sqlite3 is a native addon: node-gyp needs these when no prebuilt binary fits
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build \
 && npm ci --omit=dev --no-audit --no-fund \
 && npm cache clean --force

# ---- runtime ---------------------------------------------------------------------------------
FROM ${NODE_IMAGE} AS runtime
# OCI image annotations; pass --build-arg VERSION=… REVISION=$(git rev-parse HEAD) CREATED=… to fill them
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="fencegate" \
      org.opencontainers.image.description="A reverse proxy that enforces fencing tokens and idempotency keys at the resource's front door" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="https://github.com/fencegate/fencegate" \
      org.opencontainers.image.documentation="https://github.com/fencegate/fencegate#readme"
ENV NODE_ENV=production \
    FENCEGATE_CONFIG=/etc/fencegate/fencegate.yaml
WORKDIR /app
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
# what the gateway runs: the compiled sources and the sample service (--with-sample
# dist/examples/payments/server.js, with the helper it imports); no benchmarks, scripts, other
# examples or source maps
COPY --from=build /app/dist/src ./dist/src
COPY --from=build /app/dist/examples/payments ./dist/examples/payments
COPY --from=build /app/dist/examples/is-main.js ./dist/examples/is-main.js
COPY LICENSE ./LICENSE
COPY config/docker.yaml /etc/fencegate/fencegate.yaml
# the image's own unprivileged user "node" (uid 1000, gid 1000) owns the data folder
RUN find /app/dist -name '*.map' -delete \
 && mkdir -p /var/lib/fencegate \
 && chown 1000:1000 /var/lib/fencegate \
 && chmod 0750 /var/lib/fencegate \
 && ln -s /app/dist/src/cli.js /usr/local/bin/fencegate \
 && chmod 0755 /app/dist/src/cli.js
# numeric, so Kubernetes' runAsNonRoot can verify it is not root
USER 1000:1000
VOLUME ["/var/lib/fencegate"]
EXPOSE 8080 9464
# slim has no curl: probe the admin /healthz with node's fetch (override the URL if your config
# moves the admin listener)
ENV FENCEGATE_HEALTHCHECK_URL=http://127.0.0.1:9464/healthz
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch(process.env.FENCEGATE_HEALTHCHECK_URL,{signal:AbortSignal.timeout(2500)}).then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# SIGTERM: stop accepting, let requests in flight finish (shutdown.grace), close the store
STOPSIGNAL SIGTERM
# a 64 MiB young generation: a busy gateway collects garbage a quarter as often; no memory
# reducer: a burst after an idle minute does not start from a shrunken heap (docs/deploy.md#node-runtime)
ENTRYPOINT ["node", "--max-semi-space-size=64", "--no-memory-reducer", "/app/dist/src/cli.js"]
CMD ["start"]
