from tests.servers.fixtures import refused_url

__all__ = ["refused_url"]
