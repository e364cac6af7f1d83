from tests.servers.fixtures import loopback, refused_url

__all__ = ["loopback", "refused_url"]
