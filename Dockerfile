# genloop: an OpenAI-compatible LLM server, as a container.
#
#   docker build -t genloop .
#   docker run -p 8080:8080 -v /path/to/dir-with-model:/models:ro genloop
#
# The model is not in the image: mount a directory holding model.gguf at
# /models (or pass other arguments: `docker run ... genloop serve -m
# /models/other.gguf --host 0.0.0.0 --port 8080`). The build stage runs
# scripts/docker-build-steps, the same script the test suite runs outside
# Docker, which also checks that the binary needs no shared library beyond
# the runtime packages installed below.

FROM debian:bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
       build-essential meson ninja-build pkg-config \
       libmicrohttpd-dev libcjson-dev libuv1-dev \
       libpcre2-dev libutf8proc-dev python3 \
       libjs-marked node-dompurify libjs-highlight.js libjs-katex fonts-katex \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY meson.build meson_options.txt ./
COPY include include
COPY engine engine
COPY server server
COPY cli cli
COPY tests tests
COPY scripts scripts
# The runtime stage's package list is read from this file.
COPY Dockerfile ./
RUN scripts/docker-build-steps /build

FROM debian:bookworm-slim
# Only the shared libraries genloop links against, and curl for HEALTHCHECK.
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
       libmicrohttpd12 libcjson1 libuv1 libpcre2-8-0 libutf8proc2 curl \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 genloop \
    && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
       --shell /usr/sbin/nologin genloop \
    && mkdir -p /models
COPY --from=build /build/genloop /usr/local/bin/genloop
# Numeric, so Kubernetes can check runAsNonRoot.
USER 10001:10001
VOLUME ["/models"]
EXPOSE 8080
# /health is 503 while the model loads, so loading counts as starting up.
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8080/health"]
ENTRYPOINT ["/usr/local/bin/genloop"]
CMD ["serve", "-m", "/models/model.gguf", "--host", "0.0.0.0", "--port", "8080"]
