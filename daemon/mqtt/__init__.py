"""anyfill.daemon.mqtt: the daemon on a broker (status, events, request API) and pool links."""
