# nbrelay over streamable HTTP in a container.
#   docker build -t nbrelay .
#   docker run -p 8765:8765 -v "$PWD/notebooks:/notebooks" -v nbrelay-state:/home/nbrelay/.nbrelay nbrelay
# The bearer token is created on first start in /home/nbrelay/.nbrelay/token (mode 0600):
#   docker exec <container> cat /home/nbrelay/.nbrelay/token
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY pyproject.toml README.md /src/
COPY src /src/src
COPY jupyter-config /src/jupyter-config
RUN pip install /src && rm -rf /src \
    && useradd --create-home --uid 10001 --shell /usr/sbin/nologin nbrelay \
    && install -d -o nbrelay -g nbrelay -m 0755 /notebooks \
    && install -d -o nbrelay -g nbrelay -m 0700 /home/nbrelay/.nbrelay

USER nbrelay
WORKDIR /notebooks
VOLUME ["/notebooks", "/home/nbrelay/.nbrelay"]
EXPOSE 8765

# Healthy when /mcp answers at all: without the token that answer is 401.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.error, urllib.request\ntry:\n    urllib.request.urlopen('http://127.0.0.1:8765/mcp', timeout=4)\nexcept urllib.error.HTTPError as e:\n    sys.exit(0 if e.code == 401 else 1)\nexcept OSError:\n    sys.exit(1)\nsys.exit(1)"]

ENTRYPOINT ["nbrelay"]
CMD ["serve", "--http", "--host", "0.0.0.0", "--port", "8765", "--root", "/notebooks", "--token-file", "/home/nbrelay/.nbrelay/token"]
