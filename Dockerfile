FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY mechanisms mechanisms
COPY learners learners
COPY agents agents
COPY streams streams
COPY schemas schemas
RUN pip install --no-cache-dir .
USER nobody
# the worker's status pages listen on every interface of the container (its loopback is
# reachable from nothing); publish the port on the host's 127.0.0.1 (docker-compose.yml)
ENV DPSTREAM_WEB_BIND=0.0.0.0
# nobody has no home: the worker's --data-dir default (0700, $XDG_STATE_HOME/dpstream/...)
# goes under the container's own /tmp, which no other user of the host shares
ENV XDG_STATE_HOME=/tmp/dpstream-state
ENTRYPOINT []
CMD ["dpstream", "worker", "--broker", "kafka:19092"]
