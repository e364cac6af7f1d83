"""anyfill.daemon.desktop.capture"""
