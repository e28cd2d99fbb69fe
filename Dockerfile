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
ENTRYPOINT []
CMD ["dpstream", "worker", "--broker", "kafka:19092"]
