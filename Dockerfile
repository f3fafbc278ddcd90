# Multi-stage build: compile on Debian bookworm, run with only the runtime
# libraries. The model is mounted at /models (see README).
FROM debian:bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential meson ninja-build pkg-config \
      libmicrohttpd-dev libcjson-dev libopenblas-dev libuv1-dev check \
      libpcre2-dev libutf8proc-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN meson setup /build --buildtype=release && ninja -C /build genloop

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
      libmicrohttpd12 libcjson1 libopenblas0-pthread libuv1 libpcre2-8-0 libutf8proc2 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /nonexistent --shell /usr/sbin/nologin genloop
COPY --from=build /build/genloop /usr/local/bin/genloop
USER genloop
VOLUME /models
ENTRYPOINT ["/usr/local/bin/genloop"]
CMD ["generate", "-m", "/models/model.gguf", "-p", "Hello"]
