"""anyfill.daemon.inject"""
