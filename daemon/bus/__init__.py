"""anyfill.daemon.bus"""
