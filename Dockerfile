# tether serving Streamable HTTP, as a non-root user.
#
#   docker build -t tether .
#   docker run --rm -p 8080:8080 -e TETHER_AUTH_TOKEN=... \
#       -v $PWD/tether.json:/etc/tether/config.json:ro tether
#
# Listening on 0.0.0.0 needs a bearer token (TETHER_AUTH_TOKEN); clients send it
# as `Authorization: Bearer ...`. Backends run inside the container: install the
# runtimes they need (node, python, ...) in a derived image.
FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --locked --release -p tether-smol --bin tether

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --home-dir /home/tether --uid 10001 tether
COPY --from=build /src/target/release/tether /usr/local/bin/tether
USER tether
ENV TETHER_CONFIG=/etc/tether/config.json
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s CMD ["tether", "status", "--url", "http://127.0.0.1:8080"]
ENTRYPOINT ["tether"]
CMD ["serve", "--listen", "0.0.0.0:8080"]
