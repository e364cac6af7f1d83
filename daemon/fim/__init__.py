"""anyfill.daemon.fim"""
