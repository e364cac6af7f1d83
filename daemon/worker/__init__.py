"""anyfill.daemon.worker: `anyfill worker`, a headless member of a pool of shared workers."""
