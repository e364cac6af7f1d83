"""anyfill.daemon.desktop.inject"""
