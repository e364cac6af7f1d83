"""anyfill.daemon.models: the models a managed llama-server runs: catalog, store, download."""
