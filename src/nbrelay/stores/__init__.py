"""Where notebooks live: files on disk, a Jupyter Server's contents API, or a live room."""
