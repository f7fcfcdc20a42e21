# The bundled mock of Anthropic's API (t/mock): what the tests run against,
# for trying the gateway without a credential.  Python's standard library.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 >/dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY t/mock /opt/mock
USER nobody
EXPOSE 8080
CMD ["python3", "/opt/mock/mock.py", "--listen", "0.0.0.0:8080"]
