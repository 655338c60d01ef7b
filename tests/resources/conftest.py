"""The resources tests use the services tests' client over a folder with a sample report."""

from tests.services.conftest import client, served

__all__ = ["client", "served"]
