"""The MCP surface: one module per profile over the workspace."""
