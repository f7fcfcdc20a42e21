# Redis for the compose stack: Debian's redis-server, appending to /data.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o redis -g redis /data
USER redis
VOLUME /data
EXPOSE 6379
# on the compose network only: nothing publishes its port
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", \
     "--appendonly", "yes", "--dir", "/data", "--save", ""]
