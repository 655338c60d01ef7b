"""nbrelay: an MCP server that lets agents read, edit and run Jupyter notebooks."""

__version__ = "0.1.0"
