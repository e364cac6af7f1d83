"""anyfill.daemon.managed: the llama-server anyfill runs itself (type ``llamacpp-managed``)."""
