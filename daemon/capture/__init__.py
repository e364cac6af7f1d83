"""anyfill.daemon.capture"""
