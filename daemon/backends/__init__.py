"""anyfill.daemon.backends"""
